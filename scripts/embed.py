"""Embed one shard FASTA (proteins, .faa, or nucleotides, .fna, as the model's architecture reads) into HDF5."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import EmbedSettings, add_arguments, from_arguments
from workflow_lib.cli.threads import use_threads
from workflow_lib.embed import rates
from workflow_lib.embed.job import embed_shard
from workflow_lib.io.tables import read_json
from workflow_lib.models.check_models import known_checksums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="shard FASTA from prepare")
    parser.add_argument(
        "--tokens", help="the shard's tokens from the tokenize job, for a model that stores them (else tokenised here)"
    )
    parser.add_argument("--planned-frames", type=int, help="the frames the plan gives the shard (checked)")
    parser.add_argument(
        "--planned-tokens", type=int, help="the shard's ESM-2 tokens by the plan: the unit of the rate it records"
    )
    parser.add_argument("--embeddings", required=True, help="HDF5 file to write")
    parser.add_argument("--figures", required=True, help="JSON to write the job's figures to (HDF5 attributes, frames)")
    parser.add_argument("--model-check", required=True, help="the run's model check (JSON): checksums to reuse")
    parser.add_argument(
        "--gpus", type=int, required=True, help="GPUs the job holds whole (its gpu resource): 1, or 0 to share one"
    )
    parser.add_argument(
        "--gpu-mem-mb", type=int, required=True, help="with --gpus 0: the share of a GPU's memory the job claims (MB)"
    )
    add_arguments(parser, EmbedSettings)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    settings = from_arguments(EmbedSettings, args, known_checksums=known_checksums(args.model_check, args.model))
    # the rate is recorded where the plan gives the shard's tokens
    key = rates.model_key(read_json(args.model_check)[args.model], settings.precision) if args.planned_tokens else None
    embed_shard(
        args.input,
        args.embeddings,
        args.figures,
        settings,
        args.tokens,
        args.planned_frames,
        gpu_mem_mb=None if args.gpus else args.gpu_mem_mb,
        claim_until_exit=True,  # the claim ends with this process, which frees its GPU memory only then
        rate_key=key,
        planned_tokens=args.planned_tokens,
    )


if __name__ == "__main__":
    run_cli(main)

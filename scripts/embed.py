"""Embed one shard FASTA with ESM-2 (proteins, .faa) or DNABERT-S (nucleotides, .fna) into HDF5."""

import argparse

from workflow_lib.check_models import known_checksums
from workflow_lib.embed import PRECISIONS, EmbedSettings, embed_shard
from workflow_lib.errors import run_cli
from workflow_lib.loader import default_num_workers
from workflow_lib.models import EMBEDDING_MODELS
from workflow_lib.progress import add_progress_argument, setup_logging
from workflow_lib.threads import add_threads_argument, use_threads


def workers(text: str) -> str | int:
    if text != "auto" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected 'auto' or a count, got '{text}'")
    return text if text == "auto" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=tuple(EMBEDDING_MODELS), required=True)
    parser.add_argument("--checkpoint", required=True, help="fair-esm name or .pt path; Hugging Face id or directory")
    parser.add_argument("--layer", type=int, help="ESM-2 only (left out: the last layer)")
    parser.add_argument("--input", required=True, help="shard FASTA from prepare")
    parser.add_argument("--tokens", help="DNABERT-S: the shard's tokens from the tokenize job (else tokenised here)")
    parser.add_argument("--output", required=True, help="HDF5 file to write")
    parser.add_argument(
        "--figures", required=True, help="JSON file to write the job's figures to (HDF5 attributes, frames)"
    )
    parser.add_argument(
        "--model-check", required=True, help="the run's model check (JSON): model file checksums to reuse"
    )
    parser.add_argument("--cache-dir", required=True, help="where fetch_models put the named models")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), required=True)
    parser.add_argument("--precision", choices=tuple(PRECISIONS), required=True, help="on CUDA; the CPU uses fp32")
    parser.add_argument(
        "--storage", choices=("float32", "float16"), required=True, help="the embeddings' type in the HDF5 file"
    )
    parser.add_argument("--token-budget", type=int, required=True, help="tokens per packed batch")
    add_threads_argument(parser)
    parser.add_argument(
        "--num-workers",
        type=workers,
        required=True,
        help="loader processes; auto: one per thread beyond the first, at most 8",
    )
    parser.add_argument("--prefetch-factor", type=int, required=True, help="batches each loader worker keeps ready")
    parser.add_argument(
        "--expandable-segments",
        type=lambda value: {"true": True, "false": False}[value.lower()],
        required=True,
        help="true: expandable_segments:True for the allocator, against fragmentation; false: leave it",
    )
    parser.add_argument(
        "--commit-seconds",
        type=float,
        required=True,
        help="how often finished results are committed beside the output, for a killed job to resume",
    )
    add_progress_argument(parser)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    embed_shard(args.input, args.output, args.figures, settings(args), args.tokens)


def settings(args: argparse.Namespace) -> EmbedSettings:
    return EmbedSettings(
        model=args.model,
        checkpoint=args.checkpoint,
        layer=args.layer,
        device=args.device,
        precision=args.precision,
        storage=args.storage,
        token_budget=args.token_budget,
        cache_dir=args.cache_dir,
        num_workers=default_num_workers(args.threads) if args.num_workers == "auto" else args.num_workers,
        prefetch_factor=args.prefetch_factor,
        expandable_segments=args.expandable_segments,
        commit_seconds=args.commit_seconds,
        known_checksums=known_checksums(args.model_check, args.model),
        progress_seconds=args.progress_seconds,
    )


if __name__ == "__main__":
    run_cli(main)

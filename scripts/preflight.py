"""Before a run, on a node of the embed jobs' partition: whether torch sees the GPU, each model loads
from the cache, and how fast each embeds real frames (a rate recorded in models.cache_dir, which
later runs' embed jobs ask for their runtimes by)."""

import argparse
import shlex

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import EmbedSettings, PrepareSettings, add_arguments, from_arguments
from workflow_lib.models.check_models import known_checksums
from workflow_lib.workflow.preflight import preflight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--genome", required=True, help="FASTA whose first record the frames are cut from")
    parser.add_argument("--model-check", required=True, help="the run's model check (JSON)")
    parser.add_argument("--report", required=True, help="the report to write (JSON)")
    parser.add_argument(
        "--settings", action="append", required=True, help="a model's embed job options (scripts/embed.py's), one word"
    )
    add_arguments(parser, PrepareSettings)
    parser.add_argument("--threads", type=int, required=True, help="CPUs of the job")
    args = parser.parse_args()
    setup_logging()
    embed = argparse.ArgumentParser(prog="--settings", exit_on_error=False)
    add_arguments(embed, EmbedSettings)
    models = []
    for words in args.settings:
        model = embed.parse_args([*shlex.split(words), "--threads", str(args.threads)])
        models.append(
            from_arguments(EmbedSettings, model, known_checksums=known_checksums(args.model_check, model.model))
        )
    preflight(args.genome, from_arguments(PrepareSettings, args), models, args.model_check, args.report)


if __name__ == "__main__":
    run_cli(main)

"""Peak memory and throughput of the prepare CLI on a large input: a multi-gigabyte FASTA of
500 bp reads sampled from the bundled genomes, or (--contig-mb) one long contig.

Prints JSON. The input is written once under --workdir and reused by later runs; prepare's
outputs go to a temporary folder there and are deleted after counting. The peak is the
resident set (ru_maxrss) of the prepare process, the only child of a fresh process.

    python benchmarks/prepare_memory.py --workdir /tmp/prepare_memory --gb 2 --shard-tokens 180000000
    python benchmarks/prepare_memory.py --workdir /tmp/prepare_memory --contig-mb 100
"""

import argparse
import functools
import gzip
import random
import tempfile
from pathlib import Path

from workflow_lib.harness.measure import header, measured, print_figures
from workflow_lib.harness.stages import DEFAULTS, GENOMES, prepare_command, write_reads
from workflow_lib.io.seqio import read_records

READ_LENGTH = 500


def write_contig(path: Path, bases: int, seed: int) -> None:
    """One record of `bases` bases: 100 kb pieces of the bundled genomes, 60 bases a line."""
    genome = b"".join(seq for f in sorted(GENOMES.glob("*.fasta")) for _, _, seq in read_records(f))
    rng = random.Random(seed)
    with open(path, "wb") as out:
        out.write(b">contig synthetic\n")
        for done in range(0, bases, 100_000):
            start = rng.randrange(len(genome) - 100_000)
            piece = genome[start : start + min(100_000, bases - done)]
            out.write(b"".join(piece[i : i + 60] + b"\n" for i in range(0, len(piece), 60)))


def input_file(workdir: Path, args) -> Path:
    """The benchmark input, written under a temporary name first so that a broken write is never reused."""
    if args.contig_mb:
        path = workdir / f"contig_{args.contig_mb}Mb_seed{args.seed}.fa"
        write = functools.partial(write_contig, bases=args.contig_mb * 1_000_000, seed=args.seed)
    else:
        path = workdir / f"reads_{args.gb:g}GB_seed{args.seed}.fa"
        reads = round(args.gb * 1e9 / (len(f">read_{1_000_000}\n\n") + READ_LENGTH))
        write = functools.partial(write_reads, n=reads, length=READ_LENGTH, seed=args.seed)
    if not path.exists():
        write(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="where the input is kept between runs")
    parser.add_argument("--gb", type=float, default=2.0, help="size of the reads FASTA, in GB")
    parser.add_argument("--contig-mb", type=int, help="write one contig of this many Mb instead of reads")
    parser.add_argument("--shard-tokens", type=int, default=DEFAULTS["shard_tokens"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = input_file(workdir, args)

    with tempfile.TemporaryDirectory(dir=workdir) as outdir:
        command = prepare_command(
            path, Path(outdir), "--shard-tokens", str(args.shard_tokens), "--chunk-length", str(READ_LENGTH)
        )
        usage = measured(command)
        with gzip.open(Path(outdir) / "sequences.tsv.gz", "rb") as table:
            records = sum(1 for _ in table) - 1
        with gzip.open(Path(outdir) / "frames.tsv.gz", "rb") as table:
            frames = sum(1 for _ in table) - 1
        output_bytes = sum(f.stat().st_size for f in Path(outdir).iterdir())
    input_bytes = path.stat().st_size
    result = header("prepare_memory") | {"input": path.name, "input_bytes": input_bytes, "records": records}
    result |= {"frames": frames, "shard_tokens": args.shard_tokens, "output_bytes": output_bytes, **usage}
    print_figures(result | {"mb_per_s": round(input_bytes / 1e6 / usage["seconds"], 1)})


if __name__ == "__main__":
    main()

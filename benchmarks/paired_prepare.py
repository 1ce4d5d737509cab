"""prepare on paired-end reads against single-end reads of the same bases: throughput per base and
peak memory, at two input sizes (memory flat in the input's size).

Reads are simulated 2x150 fragments (inserts of 300-500 bp) of the bundled phage T4 and E. coli
genomes, gzipped FASTQ (level 6): the paired sample as two mate files, the single-end sample as one
file holding every mate as a read of its own (the same bases). Each run is the prepare CLI, the only
child of a fresh process; repeats alternate the two and the best of each is kept. Prints JSON.

    python benchmarks/paired_prepare.py --workdir /tmp/paired_prepare --pairs 1000000
"""

import argparse
import gzip
import tempfile
from pathlib import Path

from workflow_lib.harness.measure import header, measured, print_figures, print_progress
from workflow_lib.harness.simulate import fastq_mates, simulate_pairs
from workflow_lib.harness.stages import GENOMES, prepare_command

GENOME_FILES = ("phage_T4_NC_000866.fasta", "ecoli_536_NC_008253_first200kb.fasta")
PIECE = 50_000  # pairs simulated and written at a time


def write_inputs(workdir: Path, pairs: int, seed: int) -> tuple[Path, Path, Path]:
    """(mate 1, mate 2, single-end) files of `pairs` fragments, written once and reused."""
    paths = tuple(workdir / f"{name}_{pairs}_seed{seed}.fq.gz" for name in ("R1", "R2", "single"))
    if all(p.exists() for p in paths):
        return paths
    temporary = [p.with_suffix(".tmp") for p in paths]
    with gzip.open(temporary[0], "wb") as r1, gzip.open(temporary[1], "wb") as r2, gzip.open(temporary[2], "wb") as se:
        for piece, start in enumerate(range(0, pairs, PIECE)):
            genome = GENOMES / GENOME_FILES[piece % 2]
            fragments = simulate_pairs(genome, min(PIECE, pairs - start), seed + piece, f"p{piece}")
            r1.write(fastq_mates(fragments, 1))
            r2.write(fastq_mates(fragments, 2))
            for mate in (1, 2):  # each mate a read of its own: its own ID
                se.write(fastq_mates([(i + b"/%d" % mate, *r) for i, *r in fragments], mate))
    for tmp, path in zip(temporary, paths):
        tmp.rename(path)
    return paths


def run(files: tuple[Path, Path, Path], paired: bool, workdir: Path) -> dict:
    r1, r2, single = files
    with tempfile.TemporaryDirectory(dir=workdir) as outdir:
        options = ("--chunk-length", "300") + (("--mates", str(r2)) if paired else ())
        return measured(prepare_command(r1 if paired else single, Path(outdir), *options))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="where the inputs are kept between runs")
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = header("paired_prepare") | {"pairs": args.pairs, "bases": args.pairs * 300, "input": "FASTQ, gzip"}
    for size in (args.pairs // 4, args.pairs):
        files = write_inputs(workdir, size, args.seed)
        runs = {"paired": [], "single": []}
        for _ in range(args.repeats):
            for kind in runs:
                runs[kind].append(run(files, kind == "paired", workdir))
                print_progress({"pairs": size, kind: runs[kind][-1]})
        best = {kind: min(r["seconds"] for r in found) for kind, found in runs.items()}
        cpu = {kind: min(r["cpu_seconds"] for r in found) for kind, found in runs.items()}
        result[f"at_{size}_pairs"] = {
            **{f"{kind}_mb_per_s": round(size * 300 / 1e6 / best[kind], 1) for kind in runs},
            "paired_over_single_time": round(best["paired"] / best["single"], 3),
            # CPU seconds: on a busy machine, steadier than wall seconds
            "paired_over_single_cpu": round(cpu["paired"] / cpu["single"], 3),
            **{f"{kind}_peak_rss_mb": max(r["peak_rss_mb"] for r in found) for kind, found in runs.items()},
            "seconds_all": {kind: [r["seconds"] for r in found] for kind, found in runs.items()},
            "cpu_seconds_all": {kind: [r["cpu_seconds"] for r in found] for kind, found in runs.items()},
        }
    print_figures(result)


if __name__ == "__main__":
    main()

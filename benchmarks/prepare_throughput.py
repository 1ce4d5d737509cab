"""Throughput of prepare (parse, chunk, six-frame translate, shard, tables) on 500 bp reads.

Prints JSON. With --virnucpro-units PATH (units.py of a VirNucPro checkout, not shipped here)
it also runs VirNucPro's own chunk-and-translate code (`split_fasta_chunk`, then `identify_seq`
on every upper-cased chunk, writing the kept frames as its prediction.py does) on the same reads
in the same run, one core each, and reports the ratio.

    python benchmarks/prepare_throughput.py --reads 200000 --virnucpro-units ../VirNucPro/units.py
"""

import argparse
import gzip
import importlib.util
import os
import sys
import tempfile
import time
import types
from pathlib import Path

from harness.measure import header, print_figures
from harness.stages import DEFAULTS, prepare_into, write_reads


def load_virnucpro(units_path: str):
    """Import VirNucPro's units.py; its model imports (transformers) are not needed for chunking."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.modules["transformers"] = types.SimpleNamespace(AutoTokenizer=None, AutoModel=None)
    spec = importlib.util.spec_from_file_location("virnucpro_units", units_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_virnucpro(units, reads: Path, workdir: Path, chunk_length: int) -> None:
    from Bio import SeqIO

    chunked = workdir / "chunked.fa"
    units.split_fasta_chunk(str(reads), str(chunked), chunk_length)
    with open(workdir / "nucleotide.fa", "w") as dna_out, open(workdir / "protein.faa", "w") as protein_out:
        for record in SeqIO.parse(str(chunked), "fasta"):
            for item in units.identify_seq(record.id, str(record.seq).upper()):
                if item["protein"]:
                    dna_out.write(f">{item['seqid']}\n{item['nucleotide']}\n")
                    protein_out.write(f">{item['seqid']}\n{item['protein']}\n")


def timed(function, *args, **kwargs) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=200_000)
    parser.add_argument("--virnucpro-reads", type=int, default=20_000, help="reads for the (slow) VirNucPro run")
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--shard-tokens", type=int, default=DEFAULTS["shard_tokens"])
    parser.add_argument("--virnucpro-units", help="path to VirNucPro's units.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gzip", action="store_true", help="our side reads the reads gzipped (level 6)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core for both sides

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        reads, small = tmp / "reads.fa", tmp / "reads_small.fa"
        write_reads(reads, args.reads, args.length, args.seed)
        if args.gzip:
            (tmp / "reads.fa.gz").write_bytes(gzip.compress(reads.read_bytes(), 6))
            reads = tmp / "reads.fa.gz"
        units = load_virnucpro(args.virnucpro_units) if args.virnucpro_units else None
        if units:
            write_reads(small, args.virnucpro_reads, args.length, args.seed)
        ours, theirs = [], []
        # Interleaved repeats, best of each: this machine's speed drifts between runs.
        for repeat in range(args.repeats):
            seconds = timed(prepare_into, reads, tmp / "ours", args.shard_tokens, chunk_length=args.length)
            ours.append(args.reads / seconds)
            if units:
                workdir = tmp / f"virnucpro_{repeat}"
                workdir.mkdir()
                theirs.append(args.virnucpro_reads / timed(run_virnucpro, units, small, workdir, args.length))
        result = header("prepare_throughput") | {
            "read_length": args.length,
            "reads": args.reads,
            "input": "FASTA, gzip" if args.gzip else "FASTA",
            "repeats": args.repeats,
            "reads_per_s": round(max(ours)),
            "reads_per_s_all": [round(x) for x in ours],
        }
        if units:
            result["virnucpro_reads"] = args.virnucpro_reads
            result["virnucpro_reads_per_s"] = round(max(theirs))
            result["virnucpro_reads_per_s_all"] = [round(x) for x in theirs]
            result["speedup"] = round(max(ours) / max(theirs), 1)
    print_figures(result)


if __name__ == "__main__":
    main()

"""How well the calls weigh on genomes the classifier never saw: mixtures of 3 kb pieces of
held-out viral and non-viral genomes, at given viral fractions, classified in a finished demo's
directory with the demo's classifier and calibration. Prints JSON.

Per mixture: the chunks' calibration error (`probability_virus` against the record's label, and
the raw `max_score_virus` beside it), the realised false discovery rate among records passing each
q-value cutoff, and the sample's `viral_fraction_estimate` with its interval and `composition_fit`
against the truth (records with a scored chunk). One more sample, of random DNA and of
low-complexity repeats (units of 1 to 12 bp), gives the share of each flagged `reliable = False`.
The genomes must be ones the demo did not train on (the bundled ones are all in the demo): for
example other packages' test genomes,
`pip download --no-deps --no-binary :all: checkv biopython PhiSpy pyrodigal` (docs/weighing.md
gives the figures of two sets):

    bash run.sh demo   # or any finished demo directory
    python benchmarks/heldout_weighing.py --demo . --workdir /tmp/heldout \
        --virus checkv-1.1.1/test/ground_truth/viruses.fna \
        --other biopython-1.88/Tests/GenBank/NC_000932.gb MIIJ01000039.fna KK037166.fna human_mtDNA.fasta
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from Bio import SeqIO

from workflow_lib.classify.calibration import calibration_error
from workflow_lib.harness.measure import header, print_figures, snakemake

QVALUES = (0.1, 0.2, 0.3, 0.4, 0.5)


def pieces(paths: list[Path], length: int) -> list[tuple[str, str]]:
    """(ID, sequence) of every whole `length` piece of every record of `paths` (FASTA or GenBank)."""
    out = []
    for path in paths:
        kind = "genbank" if path.suffix in (".gb", ".gbk") else "fasta"
        for record in SeqIO.parse(path, kind):
            sequence = str(record.seq).upper()
            for start in range(0, len(sequence) - length + 1, length):
                out.append((f"{record.id}_{start + 1}", sequence[start : start + length]))
    return out


def mixture(virus: list, other: list, fraction: float, records: int, rng: np.random.Generator) -> tuple[list, dict]:
    """`records` pieces, `fraction` of them viral, drawn without replacement; their labels."""
    n_virus = round(fraction * records)
    chosen = [(virus[i], "virus") for i in rng.choice(len(virus), n_virus, replace=False)]
    chosen += [(other[i], "other") for i in rng.choice(len(other), records - n_virus, replace=False)]
    return [piece for piece, _ in chosen], {piece[0]: label for piece, label in chosen}


def unlike(records: int, length: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """`records` pieces of random DNA and as many low-complexity repeats (random units of 1-12 bp)."""
    bases = np.array(list("ACGT"))
    out = [(f"random_{i}", "".join(rng.choice(bases, length))) for i in range(records)]
    for i in range(records):
        unit = "".join(rng.choice(bases, rng.integers(1, 13)))
        out.append((f"repeat_{i}", (unit * (length // len(unit) + 1))[:length]))
    return out


def flagged(results: Path) -> dict:
    """The share of random and of repeat records flagged unreliable, and how many of each were scored."""
    sequences = pd.read_csv(results / "sequences.tsv", sep="\t")
    kind = sequences.sequence_id.str.split("_").str[0]
    return {
        k: {
            "records": int((kind == k).sum()),
            "scored": int(((kind == k) & (sequences.n_chunks_scored > 0)).sum()),
            "flagged_unreliable": round(float((~sequences.reliable[kind == k]).mean()), 3),
        }
        for k in ("random", "repeat")
    }


def weighed(results: Path, labels: dict) -> dict:
    """The figures of one classified mixture."""
    chunks = pd.read_csv(results / "chunks.tsv", sep="\t").dropna(subset=["probability_virus"])
    sequences = pd.read_csv(results / "sequences.tsv", sep="\t")
    y_chunk = (chunks.sequence_id.map(labels) == "virus").to_numpy()
    scored = sequences[sequences.n_chunks_scored > 0]
    y_record = (scored.sequence_id.map(labels) == "virus").to_numpy()
    fdr = {}
    for q in QVALUES:
        passing = (scored.qvalue <= q).to_numpy()
        fdr[str(q)] = {
            "passing": int(passing.sum()),
            "false": int((passing & ~y_record).sum()),
            "realised_fdr": round(float((~y_record[passing]).mean()), 3) if passing.any() else None,
        }
    return {
        "records_scored": len(scored),
        "viral_fraction_true": round(float(y_record.mean()), 3),
        "chunks_scored": len(chunks),
        "chunk_ece_probability": round(calibration_error(y_chunk, chunks.probability_virus.to_numpy()), 3),
        "chunk_ece_raw_score": round(calibration_error(y_chunk, chunks.max_score_virus.to_numpy()), 3),
        "record_ece_probability": round(calibration_error(y_record, scored.probability_virus.to_numpy()), 3),
        "unreliable_records": int((~scored.reliable).sum()),
        "virnucpro_calls": int((scored.call == "virus").sum()),
        "virnucpro_false_calls": int(((scored.call == "virus") & ~y_record).sum()),
        "qvalue_cutoffs": fdr,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, required=True, help="a finished demo's directory")
    parser.add_argument("--workdir", type=Path, required=True, help="where the mixtures are written")
    parser.add_argument("--virus", type=Path, nargs="+", required=True)
    parser.add_argument("--other", type=Path, nargs="+", required=True)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--records", type=int, default=200, help="pieces per mixture")
    parser.add_argument("--piece", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    virus, other = pieces(args.virus, args.piece), pieces(args.other, args.piece)
    args.workdir.mkdir(parents=True, exist_ok=True)
    sheet, truth = ["sample\tpath"], {}
    for fraction in args.fractions:
        name = f"heldout_{round(100 * fraction)}pct"
        chosen, truth[name] = mixture(virus, other, fraction, args.records, rng)
        fasta = (args.workdir / f"{name}.fasta").resolve()
        fasta.write_text("".join(f">{i}\n{s}\n" for i, s in chosen))
        sheet.append(f"{name}\t{fasta}")
    fasta = (args.workdir / "heldout_unlike.fasta").resolve()
    fasta.write_text("".join(f">{i}\n{s}\n" for i, s in unlike(args.records // 2, args.piece, rng)))
    sheet.append(f"heldout_unlike\t{fasta}")
    (args.workdir / "samples.tsv").write_text("\n".join(sheet) + "\n")

    demo = args.demo.resolve()
    sheet_option = f"samples={(args.workdir / 'samples.tsv').resolve()}"
    demo_options = (
        "--profile",
        demo / "profiles/local",
        "--configfile",
        demo / "config/demo.yaml",
        "--config",
        sheet_option,
    )
    snakemake(demo, *demo_options, log=args.workdir / "snakemake.log")
    figures = header("heldout_weighing") | {
        "pieces": {"virus": len(virus), "other": len(other), "length": args.piece},
        "mixtures": {name: weighed(demo / "results" / name, labels) for name, labels in truth.items()},
        "unlike": flagged(demo / "results/heldout_unlike"),
    }
    estimates = pd.read_csv(demo / "results/report/samples.tsv", sep="\t").set_index("sample")
    for name, figures_of in figures["mixtures"].items():
        row = estimates.loc[name]
        figures_of["viral_fraction_estimate"] = float(row["viral_fraction_estimate"])
        figures_of["viral_fraction_interval"] = [float(row["viral_fraction_low"]), float(row["viral_fraction_high"])]
        figures_of["composition_fit"] = [row["composition_fit"], float(row["composition_fit_statistic"])]
    print_figures(figures, args.out)


if __name__ == "__main__":
    main()

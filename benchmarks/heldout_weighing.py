"""How well the calls weigh on genomes the classifier never saw: mixtures of 3 kb pieces of
held-out viral and non-viral genomes, at given viral fractions, classified in a finished demo's
directory with the demo's classifier and calibration, and, with `--calibrate SHARE`, also with a
calibration that the workflow's `calibrate` target fits on that share of the pieces (labelled,
and never in a mixture): one that holds the same genomes as the mixtures. Prints JSON.

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
        --other biopython-1.88/Tests/GenBank/NC_000932.gb MIIJ01000039.fna KK037166.fna human_mtDNA.fasta \
        --calibrate 0.4
"""

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from Bio import SeqIO

from harness.measure import header, print_figures, snakemake
from workflow_lib.classify.calibration import calibration_error
from workflow_lib.io.tables import read_json

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


def split(items: list, share: float, rng: np.random.Generator) -> tuple[list, list]:
    """(`share` of `items` at random, the rest), each in the items' order."""
    chosen = np.zeros(len(items), dtype=bool)
    chosen[rng.choice(len(items), round(share * len(items)), replace=False)] = True
    return [i for i, c in zip(items, chosen) if c], [i for i, c in zip(items, ~chosen) if c]


def write(path: Path, text: str) -> Path:
    """`text` to `path`, unless it holds it already: a file rewritten is newer than what was made
    of it, and Snakemake would make it all again (the embeddings of a --reweigh run)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path.resolve()


def write_fasta(path: Path, records: list[tuple[str, str]]) -> Path:
    return write(path, "".join(f">{i}\n{s}\n" for i, s in records))


def write_yaml(path: Path, values: dict) -> Path:
    """A config file to lay over the demo's (JSON is YAML)."""
    return write(path, json.dumps(values, indent=2, default=str) + "\n")


# --reweigh: the calibrate run's and the classifying runs' rules that run again, so that changed
# weighing code applies without embedding again (nor for a rule whose command changed since: the
# rule commands hold the checkout's path, so a run from another one would embed everything anew)
ONLY = ("--rerun-triggers", "mtime", "input")
KEPT_CALIBRATION = "same_genomes_calibration.json"  # in --workdir
REWEIGH = {"calibrate": ("--forcerun", "calibrate", *ONLY), "classify": ("--forcerun", "predict", "call", *ONLY)}


def run_demo(demo: Path, workdir: Path, tag: str, overlay: dict, *targets: str) -> None:
    """Snakemake in the demo's directory with its profile and config, `overlay` laid over it;
    `targets` (and options that take several words) first."""
    options = ("--profile", demo / "profiles/local", "--configfile", demo / "config/demo.yaml")
    overlay_file = write_yaml(workdir / f"{tag}.yaml", overlay)
    snakemake(
        demo, *targets, *options, overlay_file, log=workdir / f"snakemake_{tag}.log"
    )  # --configfile takes all after it


def sample_sheet(workdir: Path, mixtures: dict, unlike_records: list) -> Path:
    """The sheet of the mixtures (name: (pieces, labels)) and of the unlike sequences, each sample
    named `workdir`'s name _ its own, whatever the calibration (another one reruns only predict and
    call)."""
    sheet = ["sample\tpath"]
    for name, (chosen, _) in mixtures.items():
        sheet.append(f"{workdir.name}_{name}\t{write_fasta(workdir / f'{name}.fasta', chosen)}")
    sheet.append(f"{workdir.name}_unlike\t{write_fasta(workdir / 'unlike.fasta', unlike_records)}")
    return write(workdir / "samples.tsv", "\n".join(sheet) + "\n")


def same_genome_calibration(demo: Path, workdir: Path, virus: list, other: list, sheet: Path, forced=()) -> Path:
    """A calibration fitted by the workflow's calibrate target on the labelled pieces `virus` and
    `other` (one calibration sample each), kept in `workdir`. The samples sheet is the mixtures'
    (`sheet`): with the demo's, whose samples are labelled, new shard pools would train the
    classifier again."""
    rows = ["sample\tpath\tlabel"]
    for label, records in (("virus", virus), ("other", other)):
        rows.append(
            f"{workdir.name}_cal_{label}\t{write_fasta(workdir / f'calibration_{label}.fasta', records)}\t{label}"
        )
    calibration_sheet = workdir / "calibration_samples.tsv"
    write(calibration_sheet, "\n".join(rows) + "\n")
    overlay = {"samples": sheet, "calibration": {"samples": calibration_sheet.resolve()}}
    run_demo(demo, workdir, "calibrate", overlay, "calibrate", *forced)
    kept = workdir / KEPT_CALIBRATION
    shutil.copyfile(demo / "results/calibration/calibration.json", kept)
    return kept.resolve()


def classified(demo: Path, workdir: Path, tag: str, mixtures: dict, sheet: Path, calibration: Path, forced=()) -> dict:
    """The samples of `sheet` (sample_sheet) classified with `calibration`; their figures (weighed,
    flagged)."""
    run_demo(demo, workdir, tag, {"samples": sheet, "models": {"calibration": calibration}}, *forced)
    estimates = pd.read_csv(demo / "results/report/samples.tsv", sep="\t").set_index("sample")
    out = {}
    for name, (_, labels) in mixtures.items():
        figures = weighed(demo / "results" / f"{workdir.name}_{name}", labels)
        row = estimates.loc[f"{workdir.name}_{name}"]
        low, high = float(row["viral_fraction_low"]), float(row["viral_fraction_high"])
        figures |= {
            "viral_fraction_estimate": float(row["viral_fraction_estimate"]),
            "viral_fraction_interval": [low, high],
            "composition_fit": [row["composition_fit"], float(row["composition_fit_statistic"])],
            "interval_covers_truth": bool(low <= figures["viral_fraction_true"] <= high),
        }
        out[name] = figures | {"goals": goals(figures)}
    unlike_row = estimates.loc[f"{workdir.name}_unlike"]
    unlike = flagged(demo / "results" / f"{workdir.name}_unlike") | {
        "composition_fit": [unlike_row["composition_fit"], float(unlike_row["composition_fit_statistic"])],
        "records_passing_qvalue": int(unlike_row["records_passing_qvalue"]),
    }
    return {"mixtures": out, "unlike": unlike}


def goals(figures: dict) -> dict:
    """Issue 50's goals for one mixture: wherever at least 10 records pass a q-value q, a realised
    FDR at most q + 0.1 (None where none passes 10); the interval covers the truth or the fit is poor."""
    held = [c["realised_fdr"] <= float(q) + 0.1 for q, c in figures["qvalue_cutoffs"].items() if c["passing"] >= 10]
    return {
        "fdr_within_q_plus_0.1": all(held) if held else None,
        "covered_or_poor": figures["interval_covers_truth"] or figures["composition_fit"][0] == "poor",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, required=True, help="a finished demo's directory")
    parser.add_argument("--workdir", type=Path, required=True, help="where the mixtures are written; names the samples")
    parser.add_argument("--virus", type=Path, nargs="+", required=True)
    parser.add_argument("--other", type=Path, nargs="+", required=True)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--records", type=int, default=200, help="pieces per mixture")
    parser.add_argument("--piece", type=int, default=3000)
    parser.add_argument(
        "--calibrate", type=float, metavar="SHARE", help="also calibrate on this share of each class's pieces"
    )
    parser.add_argument(
        "--reweigh", action="store_true", help="run calibrate, predict and call again (the weighing code changed)"
    )
    parser.add_argument(
        "--kept-calibration",
        action="store_true",
        help="with --calibrate: the same-genome calibration kept in --workdir by an earlier run, not fitted again",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kept = args.workdir / KEPT_CALIBRATION
    if args.kept_calibration and not kept.exists():
        parser.error(f"--kept-calibration: no {kept}: run once without it")

    rng = np.random.default_rng(args.seed)
    virus, other = pieces(args.virus, args.piece), pieces(args.other, args.piece)
    held_virus, held_other = ([], virus), ([], other)  # (for the calibration, for the mixtures)
    if args.calibrate:
        held_virus, held_other = split(virus, args.calibrate, rng), split(other, args.calibrate, rng)
    mixtures = {
        f"{round(100 * fraction)}pct": mixture(held_virus[1], held_other[1], fraction, args.records, rng)
        for fraction in args.fractions
    }
    unlike_records = unlike(args.records // 2, args.piece, rng)
    args.workdir.mkdir(parents=True, exist_ok=True)
    demo = args.demo.resolve()
    sheet = sample_sheet(args.workdir, mixtures, unlike_records)
    calibrations = {"demo": demo / "results/train/calibration.json"}
    if args.calibrate:
        calibrations["same_genomes"] = (
            kept.resolve()
            if args.kept_calibration
            else same_genome_calibration(
                demo, args.workdir, held_virus[0], held_other[0], sheet, REWEIGH["calibrate"] if args.reweigh else ()
            )
        )
    figures = header("heldout_weighing") | {
        "pieces": {"virus": len(virus), "other": len(other), "length": args.piece},
        "calibration_pieces": {"virus": len(held_virus[0]), "other": len(held_other[0])},
    }
    for tag, calibration in calibrations.items():
        forced = REWEIGH["classify"] if args.reweigh else ()
        figures[tag] = classified(demo, args.workdir, tag, mixtures, sheet, calibration, forced)
        fitted_on = read_json(calibration)["fitted_on"]
        kept = ("chunks", "viral_chunks", "records", "held_out_calibration_error")
        figures[tag]["calibration"] = {key: fitted_on[key] for key in kept} | {"path": str(calibration)}
    print_figures(figures, args.out)


if __name__ == "__main__":
    main()

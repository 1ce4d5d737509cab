"""How often a paired fragment's call agrees with the truth, against each of its mates' calls alone.

Simulated 2x150 fragments (inserts of 300-500 bp) of a phage (Bacillus phage gamma, truth `virus`)
and of a bacterium (E. coli, truth `other`), each a paired sample of gzipped mate files, run through
the real workflow with the demo's config (tiny seeded models and a classifier trained on the demo's
labelled genomes): the fragment's call is sequences.tsv's; a mate's call alone is VirNucPro's record
rule over that mate's chunks (chunks.tsv: a mate 1 chunk starts within length1), `no_coding_frame`
where it has none. The demo's models carry no biological meaning: the figures measure the rule, not
VirNucPro's accuracy. Prints JSON.

    python benchmarks/paired_calls.py --workdir /tmp/paired_calls --pairs 2000
"""

import argparse
from pathlib import Path

import pandas as pd
import yaml

from workflow_lib.harness.measure import header, print_figures, snakemake
from workflow_lib.harness.simulate import simulate_pairs, write_fastq_pair
from workflow_lib.harness.stages import DEFAULTS, GENOMES, ROOT
from workflow_lib.io.tables import read_table

SOURCES = {  # sample: (genome, truth)
    "phage": ("bacillus_phage_gamma_NC_007458.fasta", "virus"),
    "bacterium": ("ecoli_536_NC_008253_first200kb.fasta", "other"),
}


def write_run(workdir: Path, pairs: int, seed: int) -> Path:
    """The samples sheet (the demo's labelled genomes, and the paired samples) and config; the config's path."""
    demo = pd.read_csv(ROOT / "config" / "demo_samples.tsv", sep="\t", dtype=str, keep_default_na=False)
    demo = demo[demo["label"] != ""]
    rows = [f"{s}\t{ROOT / p}\t\t{label}\n" for s, p, label in demo.itertuples(index=False)]
    for sample, (genome, _) in SOURCES.items():
        r1, r2 = workdir / f"{sample}_R1.fastq.gz", workdir / f"{sample}_R2.fastq.gz"
        write_fastq_pair(simulate_pairs(GENOMES / genome, pairs, seed, sample), r1, r2)
        rows.append(f"{sample}\t{r1}\t{r2}\t\n")
    (workdir / "samples.tsv").write_text("sample\tpath\tpath2\tlabel\n" + "".join(rows))
    config = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text()) | {"samples": str(workdir / "samples.tsv")}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return workdir / "config.yaml"


def mate_calls(chunks: pd.DataFrame, sequences: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Each fragment's mates' calls alone (columns mate1, mate2), by VirNucPro's record rule."""
    chunks = chunks.merge(sequences[["sequence_id", "length1"]], on="sequence_id")
    chunks["mate"] = (chunks["chunk_start"] > chunks["length1"]).map({False: "mate1", True: "mate2"})
    viral = chunks.groupby(["sequence_id", "mate"])["is_virus"].mean().unstack()
    calls = viral.apply(
        lambda f: f.map(lambda x: "no_coding_frame" if pd.isna(x) else "virus" if x >= threshold else "other")
    )
    return calls.reindex(sequences["sequence_id"]).fillna("no_coding_frame")


def agreement(results: Path, truth: str, threshold: float) -> dict:
    sequences = read_table(results / "sequences.tsv")
    calls = mate_calls(read_table(results / "chunks.tsv"), sequences, threshold)
    calls["fragment"] = sequences.set_index("sequence_id")["call"]
    return {"fragments": len(sequences), **{k: round(float((calls[k] == truth).mean()), 4) for k in calls}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="an empty directory: the run's")
    parser.add_argument("--pairs", type=int, default=2000, help="fragments of each genome")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_run(workdir, args.pairs, args.seed)
    run, _ = snakemake(
        workdir, "--profile", ROOT / "profiles" / "local", "--configfile", config, log=workdir / "run.log"
    )
    threshold = DEFAULTS["predict"]["min_viral_fraction"]
    found = {s: agreement(workdir / "results" / s, truth, threshold) for s, (_, truth) in SOURCES.items()}
    both = {
        k: round(sum(f[k] * f["fragments"] for f in found.values()) / sum(f["fragments"] for f in found.values()), 4)
        for k in ("mate1", "mate2", "fragment")
    }
    result = header("paired_calls") | {"pairs_per_genome": args.pairs, "models": "the demo's (tiny, seeded)"}
    result |= {"agreement_with_truth": found | {"both": both}, "workflow_seconds": run["seconds"]}
    result["fragment_at_least_the_better_mate"] = both["fragment"] >= max(both["mate1"], both["mate2"])
    print_figures(result)


if __name__ == "__main__":
    main()

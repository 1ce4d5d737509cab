# Viral sequence identification the way VirNucPro does it, at cluster scale.
#
#   FASTA/FASTQ -> prepare (validate, chunk, six-frame translate, token-balanced shards)
#   shard -> embed (DNABERT-S on nucleotides, ESM-2 on proteins; one GPU job per shard and model)
#   embeddings -> predict (VirNucPro's MLP) -> tables
#
# Results land in results/{sample}/: frames.tsv, chunks.tsv, sequences.tsv, viral.fasta, the viral
# regions inside records (regions.tsv, regions.fasta) and VirNucPro's prediction_results*.txt/.csv,
# run_summary.json (versions, checkpoints, config, timings, counts) and the report's figures in
# report/; intermediate files in results/{sample}/prepare/ and results/{sample}/embeddings/; logs in
# logs/{rule}/. The `train` target writes a classifier from samples labelled virus/other. See README.md.

from snakemake.utils import min_version

min_version("9.0")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/prepare.smk"
include: "rules/embed.smk"
include: "rules/predict.smk"
include: "rules/train.smk"
include: "rules/calibrate.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        prediction_outputs(),
        report_outputs(),

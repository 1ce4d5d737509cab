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
include: "rules/classify.smk"
include: "rules/training.smk"
include: "rules/report.smk"


onstart:
    # a cluster job that can never start is cancelled with its reason, not waited for
    if workflow.non_local_exec and shutil.which("squeue"):
        watch_pending(SETTINGS["pending_check_seconds"], JOB_GROUPS)


onsuccess:
    # each weighed sample's composition, whether the calibration fits it, and what that means for its q-values
    for line in composition_lines({s: rules.call.output.manifest.format(sample=s) for s in SAMPLES.sheet}):
        print(line, file=sys.stderr)
    # the preflight's figures, when this run made them (its job's log is on the node under SLURM)
    for line in rates.preflight_lines(rules.preflight.output.report, STARTED):
        print(line, file=sys.stderr)


onerror:
    # a cluster job's error line is in its log, not on this console (scripts/run_logged.sh)
    if workflow.non_local_exec:
        for line in failed_job_reasons(log):
            print(f"failed: {line}", file=sys.stderr)
    # Snakemake's own log and metadata on a full disk fail with a traceback or not at all
    if full := full_disk_here():
        print(f"error: {full}", file=sys.stderr)


rule all:
    default_target: True
    input:
        model_files.fetched_classifier(SETTINGS),  # fetched and checked first, not after the plan
        prediction_outputs(),
        report_outputs(),

# A sample's reads validated, chunked, translated in six frames and cut into token-balanced shards,
# each held in memory until it is written in bin order: memory follows shard_tokens, whatever the
# input; time grows with it: 4 min per GB of (compressed) input, a margin over the rate
# docs/performance.md measured for gzip and a busy node.
rule prepare:
    input:
        sample_input,  # read as its --input and --mates options (sample_reads)
    output:
        shards=temp_unless_kept(directory("results/{sample}/prepare/shards")),
        shard_table="results/{sample}/prepare/shards.tsv",
        bins="results/{sample}/prepare/bins.npz",
        frames="results/{sample}/prepare/frames.tsv.gz",
        sequences="results/{sample}/prepare/sequences.tsv.gz",
    log:
        "logs/prepare/{sample}.log",
    benchmark:
        "results/benchmarks/prepare/{sample}.tsv"
    group:
        sample_group(SMALL_PREPARE_GROUP)
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=job_resources.prepare_mem_mb(SETTINGS["shard_tokens"]),
        runtime=by_input(10, 4),
        tuning=tuning_of(PrepareSettings),
    params:
        files=named_files,
        args=job_args(sample_reads, settings=PrepareSettings),
    shell:
        script_job("prepare", "{resources.tuning}")


# The checkpoint of a generation of samples (those planned together; samples appended to a finished
# run are the next generation): once they are prepared, the plan cuts their shards' bins into pooled
# shards of at most shard_tokens distinct tokens (workflow_lib/prepare/plan.py), and the jobs of every
# pooled shard join the DAG at once (a checkpoint per sample would cost Snakemake
# time quadratic in the samples). It waits for the model check too, so that a wrong classifier
# stops the run before any embedding, and a dry run shows the check. A local rule: it only
# concatenates small tables.
checkpoint plan:
    input:
        MODEL_CHECK,  # a wrong classifier stops the run before any embedding
        bins_files=lambda wildcards: expand(rules.prepare.output.bins, sample=generation_samples(wildcards)),
    output:
        plan=f"{PLAN_DIR}/shards_{{generation}}.tsv",
    log:
        "logs/plan/{generation}.log",
    priority: PRIORITY["plan"]
    localrule: True
    conda:
        "../envs/cpu.yaml"
    params:
        files=named_files,
        args=job_args(sample=generation_samples, settings=PlanSettings),
    shell:
        script_job("plan", "--generation {wildcards.generation}")

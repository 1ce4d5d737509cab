# A pooled shard: a range of bins of its generation's shards (the plan, workflow_lib/prepare/plan.py),
# each shard's frames of those bins one after the other. A pool of all of one sample's shard needs
# none: its jobs read prepare's shard. It copies at most shard_tokens distinct tokens a shard.
rule pool_shard:
    input:
        PLAN.shard_dirs,  # read as its --piece options, with the samples' bins files
        PLAN.plan,
    output:
        fna=temp_unless_kept("results/shards/shard_{pool}.fna"),
        faa=temp_unless_kept("results/shards/shard_{pool}.faa"),
    log:
        "logs/pool_shard/{pool}.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=500,
        runtime=30,
    params:
        files=named_files,
        args=job_args(PLAN.pool_pieces),
    shell:
        script_job("pool_shard")


# A shard's tokens for a model whose architecture stores them (DNABERT-S), made once in a CPU job:
# tokenising in the embed job's loader workers would make the BPE tokenizer its host limit
# (docs/performance.md); they only read the tokens. Temp: removed once its embeddings exist. One
# block of records and its tokens at a time, whatever the shard's size.
rule tokenize:
    input:
        PLAN.fasta_pair,  # the job reads its model's FASTA of the pair (its --input)
        PLAN.plan,
        lambda wildcards: model_files.local_checkpoints(SETTINGS, wildcards.model),
    output:
        tokens=temp("results/shards/tokens/{model}/shard_{pool}.h5"),
    log:
        "logs/tokenize/{model}_{pool}.log",
    benchmark:
        "results/benchmarks/tokenize/{model}_{pool}.tsv"
    wildcard_constraints:
        model=PLAN.tokenized_models(),
    priority: PLAN.embed_priority
    conda:
        "../envs/embed.yaml"
    resources:
        mem_mb=2000,
        runtime=PLAN.tokenize_runtime,
        env=model_files.model_env(SETTINGS),
    params:
        files=named_files,
        args=job_args(input=PLAN.model_fasta, settings=TokenizeSettings),
    shell:
        script_job("tokenize_shard", f"--model {{wildcards.model}} --model-check {MODEL_CHECK}", env="{resources.env}")


# A shard's embeddings by one model: the one job retried (a preemption, a lost node; the profiles
# say how often, as preemptible-retries), for it resumes from its last commit; any other job's
# failure would only repeat. Memory: the model, built in place, each checkpoint tensor's file pages
# handed back once it is converted (its peak: docs/performance.md; a GPU
# job's weights go to the GPU), the loader workers' batches, and one shard's counters (bounded by
# shard_tokens). gpu: a whole GPU (profiles/local sets it to 0 for jobs that share GPUs);
# gpu_mem_mb: the share of a GPU's memory such a job claims, from its model and token budget
# (workflow_lib/workflow/job_resources.py). The compile caches outlive the run: one job's compile
# serves the rest. It (and tokenize) reads the model check (--model-check) without naming it as an
# input: the plan waits for the check, so every pooled shard's jobs come after it, and a classifier
# swap, which reruns the check, reruns the plan and the scores, not the embeddings.
rule embed:
    input:
        PLAN.fasta_pair,  # the job reads its model's FASTA of the pair (its --input)
        PLAN.plan,
        model_files.local_checkpoints(SETTINGS),
        tokens=PLAN.stored_tokens,
    output:
        embeddings=temp_unless_kept("results/shards/embeddings/{model}/shard_{pool}.h5"),
        figures="results/shards/embeddings/{model}/shard_{pool}.json",
    log:
        "logs/embed/{model}_{pool}.log",
    benchmark:
        "results/benchmarks/embed/{model}_{pool}.tsv"
    priority: PLAN.embed_priority
    conda:
        "../envs/embed.yaml"
    threads: job_resources.embed_threads(SETTINGS["embedding"])
    resources:
        gpu=PLAN.embed_gpus,
        gpu_mem_mb=PLAN.embed_gpu_mem,
        mem_mb=16000,
        runtime=PLAN.embed_runtime,
        tuning=tuning_of(EmbedSettings),
        planned_frames=PLAN.planned_frames,
        planned_tokens=PLAN.planned_tokens,
        env=model_files.model_env(SETTINGS, compiles=True),
    params:
        files=named_files,
        args=job_args(input=PLAN.model_fasta, settings=EmbedSettings),
    shell:
        script_job(
            "embed",
            f"--model {{wildcards.model}} --model-check {MODEL_CHECK} {{resources.tuning}} "
            "--planned-frames {resources.planned_frames} "
            "--planned-tokens {resources.planned_tokens} "
            "--threads {threads} --gpus {resources.gpu} --gpu-mem-mb {resources.gpu_mem_mb}",
            env="{resources.env}",
        )


# Before a run, once on a GPU node of the partition the embed jobs will use (docs/cluster.md), with
# an embed job's resources: torch sees the GPU, each model loads from the cache, and each embeds
# frames of a bundled phage's reads; its rate is recorded in models.cache_dir, where later runs'
# embed jobs take their runtime requests from. Minutes: the profile's default runtime.
rule preflight:
    input:
        genome=f"{ROOT}/resources/genomes/phage_T4_NC_000866.fasta",
        model_check=MODEL_CHECK,  # after the models it checks, fetched or built
    output:
        report="results/preflight.json",
    log:
        "logs/preflight.log",
    conda:
        "../envs/embed.yaml"
    threads: job_resources.embed_threads(SETTINGS["embedding"])
    resources:
        gpu=1,
        mem_mb=16000,
        tuning=tuning_of(PrepareSettings),
        env=model_files.model_env(SETTINGS, compiles=True),
    params:
        files=named_files,
        args=job_args(job_commands.model_settings(EmbedSettings, SETTINGS), settings=PrepareSettings),
    shell:
        script_job("preflight", "{resources.tuning} --threads {threads}", env="{resources.env}")

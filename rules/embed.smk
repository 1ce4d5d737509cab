rule embed:
    input:
        fasta=shard_fasta,
        models=model_files(),
        check=ancient(MODEL_CHECK),  # a classifier swap reruns the check, not the embeddings
    output:
        embeddings=embeddings_path(
            "results/{sample}/embeddings/{model}/shard_{shard}.h5"
        ),
        figures="results/{sample}/embeddings/{model}/shard_{shard}.json",
    log:
        "logs/embed/{sample}/{model}_{shard}.log",
    benchmark:
        "results/benchmarks/embed/{sample}/{model}_{shard}.tsv"
    conda:
        "../envs/embed.yaml"
    threads: embed_threads
    resources:
        gpu=embed_gpus,
        mem_mb=16000,
        runtime=240,
        token_budget=token_budget,
        progress_seconds=runtime(config["progress_seconds"]),
        num_workers=runtime(config["embedding"]["num_workers"]),
        prefetch_factor=runtime(config["embedding"]["prefetch_factor"]),
        commit_seconds=runtime(config["embedding"]["commit_seconds"]),
        expandable_segments=runtime(config["embedding"]["expandable_segments"]),
    params:
        logged=RUN_LOGGED,
        script=script("embed"),
        settings=embed_args,
        env=offline_env(),
    shell:
        "bash {params.logged:q} {log:q} env {params.env} python {params.script:q} {params.settings} --threads {threads} "
        "--token-budget {resources.token_budget} --num-workers {resources.num_workers} "
        "--prefetch-factor {resources.prefetch_factor} "
        "--commit-seconds {resources.commit_seconds} "
        "--expandable-segments {resources.expandable_segments} "
        "--progress-seconds {resources.progress_seconds} --model-check {input.check:q} "
        "--input {input.fasta:q} --output {output.embeddings:q} --figures {output.figures:q}"

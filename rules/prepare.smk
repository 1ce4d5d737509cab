rule prepare:
    input:
        sample_input,
    output:
        shards=expand(
            "results/{{sample}}/prepare/shard_{shard}.{ext}",
            shard=SHARDS,
            ext=("fna", "faa"),
        ),
        frames="results/{sample}/prepare/frames.tsv.gz",
        sequences="results/{sample}/prepare/sequences.tsv.gz",
    log:
        "logs/prepare/{sample}.log",
    benchmark:
        "results/benchmarks/prepare/{sample}.tsv"
    retries: 0  # deterministic: a failure would fail again (only embed jobs are retried)
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
        progress_seconds=runtime(config["progress_seconds"]),
    params:
        logged=RUN_LOGGED,
        script=script("prepare"),
        args=prepare_args,
        outdir=subpath(output.frames, parent=True),
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} --input {input:q} --outdir {params.outdir:q} {params.args} "
        "--progress-seconds {resources.progress_seconds}"

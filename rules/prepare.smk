rule prepare:
    input:
        sample_input,
    output:
        fna=expand("results/{{sample}}/prepare/shard_{shard}.fna", shard=SHARDS),
        faa=expand("results/{{sample}}/prepare/shard_{shard}.faa", shard=SHARDS),
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
        settings=cli(
            chunk_length=config["chunk_length"],
            ambiguous_codons=config["translation"]["ambiguous_codons"],
            min_length=config["input"]["min_length"],
            max_ambiguous_fraction=config["input"]["max_ambiguous_fraction"],
        ),
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} --input {input:q} --fna {output.fna:q} "
        "--faa {output.faa:q} --frames {output.frames:q} --sequences {output.sequences:q} {params.settings} "
        "--progress-seconds {resources.progress_seconds}"

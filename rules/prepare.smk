rule prepare:
    input:
        sample_input,
    output:
        fna=shard_fasta_paths(
            expand("results/{{sample}}/prepare/shard_{shard}.fna", shard=SHARDS)
        ),
        faa=shard_fasta_paths(
            expand("results/{{sample}}/prepare/shard_{shard}.faa", shard=SHARDS)
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
    # memory stays near 164 MB whatever the input (docs/performance.md: 2 GB of reads); time grows
    # with it: about 40 MB/s of uncompressed reads on one core, so 4 min per GB of (compressed) input
    # leaves a factor of 2-4 for gzip and a busy node
    resources:
        mem_mb=2000,
        runtime=by_input(30, 4),
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

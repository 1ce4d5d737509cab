rule embed:
    input:
        fasta=shard_fasta,
        models=model_files(),
        check=MODEL_CHECK,
    output:
        embeddings_path("results/{sample}/embeddings/{model}/shard_{shard}.h5"),
    log:
        "logs/embed/{sample}/{model}_{shard}.log",
    benchmark:
        "results/benchmarks/embed/{sample}/{model}_{shard}.tsv"
    conda:
        "../envs/embed.yaml"
    threads: embed_threads
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=240,
    params:
        script=script("embed"),
        args=embed_args,
        env=offline_env(),
    shell:
        "{params.env} python {params.script:q} {params.args} --threads {threads} --model-check {input.check:q} "
        "--input {input.fasta:q} --output {output:q} > {log:q} 2>&1"

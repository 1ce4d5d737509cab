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
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
    params:
        script=script("prepare"),
        args=prepare_args,
        outdir=subpath(output.frames, parent=True),
    shell:
        "python {params.script:q} --input {input:q} --outdir {params.outdir:q} {params.args} > {log:q} 2>&1"

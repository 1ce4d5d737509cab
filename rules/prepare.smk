rule prepare:
    input:
        sample_input,
    output:
        shards=expand("results/{{sample}}/prepare/shard_{shard}.{ext}", shard=SHARDS, ext=("fna", "faa")),
        frames="results/{sample}/prepare/frames.tsv.gz",
        sequences="results/{sample}/prepare/sequences.tsv.gz",
    log:
        "logs/prepare/{sample}.log",
    benchmark:
        "results/benchmarks/prepare/{sample}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        args=prepare_args,
        outdir=subpath(output.frames, parent=True),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
    shell:
        "python {workflow.basedir}/scripts/prepare.py --input {input} --outdir {params.outdir} {params.args} > {log} 2>&1"

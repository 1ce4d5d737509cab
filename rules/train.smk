rule train:
    input:
        unpack(training_embeddings),
    output:
        classifier=config["train"]["classifier"],
        metrics="results/train/metrics.json",
    log:
        "logs/train.log",
    benchmark:
        "results/benchmarks/train.tsv"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        script=script("train"),
        args=train_args,
    shell:
        "python {params.script:q} {params.args} --output {output.classifier:q} "
        "--metrics {output.metrics:q} > {log:q} 2>&1"

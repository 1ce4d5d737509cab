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
    params:
        args=train_args,
    threads: 1
    resources:
        mem_mb=8000,
        runtime=120,
    shell:
        "python {workflow.basedir}/scripts/train.py {params.args} --output {output.classifier} "
        "--metrics {output.metrics} > {log} 2>&1"

rule predict:
    input:
        prepared="results/{sample}/prepare/frames.tsv.gz",
        sequences="results/{sample}/prepare/sequences.tsv.gz",
        dnabert=lambda wildcards: shard_embeddings(wildcards.sample, "dnabert"),
        esm=lambda wildcards: shard_embeddings(wildcards.sample, "esm"),
        classifier=classifier_file(),
        check=MODEL_CHECK,
    output:
        frames="results/{sample}/frames.tsv",
        chunks=report(
            "results/{sample}/chunks.tsv",
            caption="../report/chunks.rst",
            category="Predictions",
            subcategory="{sample}",
            labels={"item": "chunks table (download)"},
        ),
        scoring="results/{sample}/scoring.json",
        virnucpro=expand("results/{{sample}}/{name}", name=VIRNUCPRO_TABLES),
    log:
        "logs/predict/{sample}.log",
    benchmark:
        "results/benchmarks/predict/{sample}.tsv"
    retries: 0  # deterministic: a failure would fail again (only embed jobs are retried)
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
        progress_seconds=runtime(config["progress_seconds"]),
    params:
        logged=RUN_LOGGED,
        script=script("predict"),
        args=predict_args,
        prepare_dir=subpath(input.prepared, parent=True),
        outdir=subpath(output.frames, parent=True),
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} --prepare-dir {params.prepare_dir:q} "
        "--dnabert {input.dnabert:q} --esm {input.esm:q} --classifier {input.classifier:q} "
        "--outdir {params.outdir:q} {params.args} --progress-seconds {resources.progress_seconds} --threads {threads}"


rule call:
    input:
        sequences="results/{sample}/prepare/sequences.tsv.gz",
        chunks="results/{sample}/chunks.tsv",
        scoring="results/{sample}/scoring.json",
        reads=sample_input,
    output:
        sequences=report(
            "results/{sample}/sequences.tsv",
            caption="../report/sequences.rst",
            category="Predictions",
            subcategory="{sample}",
            labels={"item": "sequences table (download)"},
        ),
        viral="results/{sample}/viral.fasta",
        manifest="results/{sample}/manifest.json",
    log:
        "logs/call/{sample}.log",
    retries: 0  # deterministic: a failure would fail again (only embed jobs are retried)
    conda:
        "../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        logged=RUN_LOGGED,
        script=script("call"),
        min_viral_fraction=config["predict"]["min_viral_fraction"],
        outdir=subpath(output.sequences, parent=True),
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} --sequences {input.sequences:q} "
        "--chunks {input.chunks:q} --scoring {input.scoring:q} --input {input.reads:q} --outdir {params.outdir:q} "
        "--min-viral-fraction {params.min_viral_fraction}"

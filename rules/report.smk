# A sample's run summary: versions, checkpoints, config, timings, counts. prepare's sequences table
# is read in blocks (memory bounded at any size); time grows with it (2 min per GB of the gzipped
# table, a margin over docs/performance.md's rate).
rule summarize:
    input:
        # the embed jobs' figures, not their embeddings (gone once scored, unless kept)
        embed_record_files,
        prepared_sequences=rules.prepare.output.sequences,
        manifest=rules.call.output.manifest,
        benchmark_prepare=rules.prepare.benchmark,
        benchmark_score=sample_pools_of(rules.score.benchmark),
        benchmark_predict=rules.predict.benchmark,
    output:
        summary=page(
            "results/{sample}/run_summary.json", "run_summary.rst", "Run summary", "run summary (download)", "{sample}"
        ),
    log:
        "logs/summarize/{sample}.log",
    group:
        sample_group(SMALL_SAMPLE_GROUP, SAMPLE_REPORT_GROUP)
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=1000,
        runtime=by_input(10, 2, "prepared_sequences"),
    params:
        files=named_files,
        args=job_args(
            embed_record_options,
            config=json.dumps(job_commands.result_config(SETTINGS)),
            snakemake_version=snakemake_version,
        ),
        # VirNucPro's tables turned off: the toggle reruns no predict, but the summary
        unwritten=unwritten_files(SETTINGS["outputs"]["virnucpro_tables"], *VIRNUCPRO_TABLES),
    shell:
        script_job("summarize", "--sample {wildcards.sample:q}")


# A sample's pages of the report. Every table is read in blocks of the columns drawn (memory
# bounded at any size); time grows with the tables: 3 min per GB of them, a margin over the rate
# on a busy core (docs/performance.md).
rule plot_sample:
    input:
        frames=rules.predict.output.frames,
        chunks=rules.predict.output.chunks,
        sequences=rules.call.output.sequences,
        regions=rules.call.output.regions,
        prepared_sequences=rules.prepare.output.sequences,
        summary=rules.summarize.output.summary,
    output:
        scores_page=sample_page("scores.png", "scores.rst", "Predictions", "virus score distributions"),
        calls_page=sample_page("calls.png", "calls.rst", "Predictions", "calls"),
        top_sequences_page=sample_page(
            "top_sequences.png", "top_sequences.rst", "Predictions", "top sequences along their length"
        ),
        top_regions_page=sample_page(
            "top_regions.png", "top_regions.rst", "Predictions", "strongest viral regions along their records"
        ),
        table_page=sample_page("sequences.html", "sequences_table.rst", "Predictions", "top sequences table"),
        input_page=sample_page("input.png", "input.rst", "Input", "input statistics"),
        throughput_page=sample_page("throughput.png", "throughput.rst", "Embedding", "throughput per shard"),
    log:
        "logs/plot_sample/{sample}.log",
    group:
        sample_group(SMALL_SAMPLE_GROUP, SAMPLE_REPORT_GROUP)
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=by_input(10, 3),
    params:
        files=named_files,
        args=job_args(settings=PlotSampleSettings),
    shell:
        script_job("plot_sample", "--sample {wildcards.sample:q}")


# The report's overview and samples.tsv, from the run summaries only: a few kB a sample.
rule overview:
    input:
        summaries=expand(rules.summarize.output.summary, sample=SAMPLES.sheet),
    output:
        page=page("results/report/overview.html", "overview.rst", "Overview", "samples, models and settings"),
        table="results/report/samples.tsv",
        recorded=RECORDED,
    log:
        "logs/overview.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=by_input(1000, 1024),
        runtime=10,
    params:
        files=named_files,
        unwritten=unwritten_files(SETTINGS["models"]["calibration"] is not None, "results/report/calibration.png"),
    shell:
        script_job("overview")


# The training figures, from one metrics.json: its size does not grow with the input.
rule plot_training:
    input:
        # a function: without labelled samples, the train rule is a stub with no metrics
        metrics=lambda wildcards: rules.train.output.metrics,
    output:
        roc=page("results/train/roc.png", "roc.rst", "Training", "validation ROC curve"),
        table=page("results/train/metrics.html", "metrics.rst", "Training", "training metrics"),
    log:
        "logs/plot_training.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        files=named_files,
    shell:
        script_job("plot_training")


# The weighing figure. The sequences tables are read in blocks, two columns: memory bounded at
# any size.
rule plot_calibration:
    input:
        calibration=model_files.calibration_file(SETTINGS),
        sequences=expand(rules.call.output.sequences, sample=SAMPLES.sheet),
        manifests=expand(rules.call.output.manifest, sample=SAMPLES.sheet),
    output:
        figure=page(
            "results/report/calibration.png",
            "calibration.rst",
            "Weighing the calls",
            "reliability, viral fractions, calls by q-value",
        ),
    log:
        "logs/plot_calibration.log",
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=1000,
        runtime=by_input(10, 2, "sequences"),
    params:
        files=named_files,
        args=job_args(sample=SAMPLES.sheet),
    shell:
        script_job("plot_calibration")

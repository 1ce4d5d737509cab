rule predict:
    input:
        prepared_frames=rules.prepare.output.frames,
        prepared_sequences=rules.prepare.output.sequences,
        scores=lambda wildcards: shard_outputs(
            rules.score.output.scores, wildcards.sample
        ),
        calibration=model_files.calibration_file(config),
    output:
        frames="results/{sample}/frames.tsv",
        chunks=attached_table(
            "chunks",
            caption="../report/chunks.rst",
            category="Predictions",
            subcategory="{sample}",
            labels={"item": "chunks table (download)"},
        ),
        scoring="results/{sample}/scoring.json",
        # VirNucPro's own tables, when outputs.virnucpro_tables asks for them
        virnucpro=expand(
            "results/{{sample}}/{name}",
            name=(
                ["prediction_results.txt", "prediction_results_highestscore.csv"]
                if config["outputs"]["virnucpro_tables"]
                else []
            ),
        ),
    log:
        "logs/predict/{sample}.log",
    benchmark:
        "results/benchmarks/predict/{sample}.tsv"
    group:
        sample_group(SMALL_SAMPLE_GROUP)
    conda:
        "../envs/cpu.yaml"
    # predict holds one block of frames-table rows and their scores whatever the sample's size; its
    # time is reading the frames table and writing the tables
    resources:
        mem_mb=2000,
        runtime=by_input(10, 10),
        tuning=tuning_of(PredictSettings),
    params:
        files=named_files,
    shell:
        script_job(
            "predict",
            "{params.files} --sample {wildcards.sample:q} {resources.tuning}",
        )


rule call:
    input:
        sample_input,  # read as its --input and --mates options (params.reads), for viral.fasta
        prepared_sequences=rules.prepare.output.sequences,
        chunks=rules.predict.output.chunks,
        scoring=rules.predict.output.scoring,
        calibration=model_files.calibration_file(config),
    output:
        sequences=attached_table(
            "sequences",
            caption="../report/sequences.rst",
            category="Predictions",
            subcategory="{sample}",
            labels={"item": "sequences table (download)"},
        ),
        viral="results/{sample}/viral.fasta",
        regions="results/{sample}/regions.tsv",
        regions_fasta="results/{sample}/regions.fasta",
        manifest="results/{sample}/manifest.json",
        # with call.max_qvalue: the records and regions within that q-value
        passing=expand(
            "results/{{sample}}/{name}",
            name=(
                ["viral_qvalue.fasta", "regions_qvalue.fasta"]
                # none without a calibration: the start-up drops that cutoff (config_check.py)
                if config["call"]["max_qvalue"] is not None
                else []
            ),
        ),
    log:
        "logs/call/{sample}.log",
    group:
        sample_group(SMALL_SAMPLE_GROUP)
    conda:
        "../envs/cpu.yaml"
    # call holds a block of records and the input's longest record (198 MB at 1 M reads,
    # docs/performance.md); its time is reading its tables and the sample's reads (for viral.fasta)
    resources:
        mem_mb=2000,
        runtime=by_input(10, 5),
    params:
        files=named_files,
        reads=sample_reads,
        settings=settings_of(CallSettings),
    shell:
        script_job("call", "{params.files} {params.reads} {params.settings}")

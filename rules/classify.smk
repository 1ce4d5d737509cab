# A pooled shard's scores as soon as its embeddings by every model exist: with outputs.keep_embeddings:
# false its embeddings (temp) go right after, and so does its FASTA pair (removed by the job:
# Snakemake would remove prepare's shards directory only after the sample's last embed job). Whether to remove it
# is a resource, which Snakemake does not compare: keeping the embeddings or not reruns nothing.
# Memory: one block of frames and their features, whatever the shard (docs/performance.md).
rule score:
    input:
        PLAN.plan,
        MODEL_CHECK,
        embeddings=PLAN.embeddings,
        classifier=model_files.classifier_file(SETTINGS),
    output:
        scores="results/shards/scores/shard_{pool}.npz",
    log:
        "logs/score/{pool}.log",
    benchmark:
        "results/benchmarks/score/{pool}.tsv"
    priority: PRIORITY["score"]
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=by_input(10, 2, "embeddings"),
        tuning=tuning_of(ScoreSettings),
        remove_shard_fasta=str(not SETTINGS["outputs"]["keep_embeddings"]),
    params:
        files=named_files,
        args=job_args(PLAN.scored_pieces, shard_fasta=PLAN.spent_fasta),
    shell:
        script_job(
            "score", "--remove-shard-fasta {resources.remove_shard_fasta} {resources.tuning} --threads {threads}"
        )


# A sample's frames and chunks tables (and VirNucPro's two) from its shards' scores. predict holds
# one block of frames-table rows and their scores whatever the sample's size; its time is reading
# the frames table and writing the tables.
rule predict:
    input:
        prepared_frames=rules.prepare.output.frames,
        prepared_sequences=rules.prepare.output.sequences,
        bins=rules.prepare.output.bins,
        scores=sample_pools_of(rules.score.output.scores),
        calibration=model_files.calibration_file(SETTINGS),
    output:
        frames="results/{sample}/frames.tsv",
        chunks=attached_table("chunks", "chunks table (download)"),
        scoring="results/{sample}/scoring.json",
        virnucpro=optional_files(SETTINGS["outputs"]["virnucpro_tables"], *VIRNUCPRO_TABLES),
    log:
        "logs/predict/{sample}.log",
    benchmark:
        "results/benchmarks/predict/{sample}.tsv"
    group:
        sample_group(SMALL_SAMPLE_GROUP)
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=by_input(10, 10),
        tuning=tuning_of(PredictSettings),
    params:
        files=named_files,
        unwritten=unwritten_files(SETTINGS["outputs"]["virnucpro_tables"], *VIRNUCPRO_TABLES),
    shell:
        script_job("predict", "--sample {wildcards.sample:q} {resources.tuning}")


# A sample's calls: its sequences table, viral.fasta, the viral regions, and the records and regions
# within call.max_qvalue (null without a calibration: config_check.py). call holds a block of
# records and the input's longest record (docs/performance.md); its time is
# reading its tables and the sample's reads (for viral.fasta).
rule call:
    input:
        sample_input,  # read as its --input and --mates options (sample_reads), for viral.fasta
        prepared_sequences=rules.prepare.output.sequences,
        chunks=rules.predict.output.chunks,
        scoring=rules.predict.output.scoring,
        calibration=model_files.calibration_file(SETTINGS),
        embed_figures=embed_figure_files,
    output:
        sequences=attached_table("sequences", "sequences table (download)"),
        viral="results/{sample}/viral.fasta",
        regions="results/{sample}/regions.tsv",
        regions_fasta="results/{sample}/regions.fasta",
        manifest="results/{sample}/manifest.json",
        passing=optional_files(SETTINGS["call"]["max_qvalue"] is not None, *QVALUE_FASTA),
    log:
        "logs/call/{sample}.log",
    group:
        sample_group(SMALL_SAMPLE_GROUP)
    conda:
        "../envs/cpu.yaml"
    resources:
        mem_mb=2000,
        runtime=by_input(10, 5),
    params:
        files=named_files,
        args=job_args(sample_reads, settings=CallSettings),
        unwritten=unwritten_files(SETTINGS["call"]["max_qvalue"] is not None, *QVALUE_FASTA),
    shell:
        script_job("call")

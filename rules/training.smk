# The train target learns from the samples labelled virus or other. A sheet that labels none has
# no train job: models.classifier is then a file given as it is, even at the train output's path.
if SAMPLES.labelled:

    # train holds the training samples' features once, as float32 (twice their size on disk when
    # stored as float16), and a copy of the validation rows (its peak: docs/performance.md); time
    # grows with them, and with the trainings that cross-fit the calibration
    # (train.calibration_folds, each on most of the features).
    rule train:
        input:
            training_embeddings,
        output:
            classifier=SETTINGS["train"]["classifier"],
            calibration=SETTINGS["train"]["calibration"],
            metrics="results/train/metrics.json",
        log:
            "logs/train.log",
        benchmark:
            "results/benchmarks/train.tsv"
        conda:
            "../envs/cpu.yaml"
        resources:
            mem_mb=by_input(4000, 3 * 1024),
            runtime=by_input(120, 10 * (1 + SETTINGS["train"]["calibration_folds"])),
            tuning=tuning_of(TrainSettings),
        params:
            files=named_files,
            args=job_args(labelled_shards, settings=TrainSettings),
        shell:
            script_job("train", "{resources.tuning} --threads {threads}")

else:

    rule train:
        output:
            "results/train/no_labelled_samples",
        log:
            "logs/train.log",
        localrule: True
        conda:
            "../envs/cpu.yaml"
        params:
            message=f"{SETTINGS['samples']}: the train target needs samples labelled virus or other in a label column",
        shell:
            "echo {params.message:q} | tee {log:q} >&2; exit 1"


# The calibrate target fits a calibration for models.classifier from the labelled samples of
# calibration.samples (docs/weighing.md): they are prepared, embedded and scored like any sample,
# and read from their scores, never called.
if len(SAMPLES.calibration):

    # calibrate holds a score and a label per chunk of the calibration samples (tens of bytes a
    # chunk) and fits on them (its memory and time: docs/performance.md).
    rule calibrate:
        input:
            calibration_files,  # read as the samples' --sample options
            MODEL_CHECK,
        output:
            calibration="results/calibration/calibration.json",
        log:
            "logs/calibrate.log",
        benchmark:
            "results/benchmarks/calibrate.tsv"
        conda:
            "../envs/cpu.yaml"
        resources:
            mem_mb=by_input(2000, 200),
            runtime=by_input(30, 10),
            tuning=tuning_of(CalibrateSettings),
        params:
            files=named_files,
            args=job_args(sample=calibration_samples, settings=CalibrateSettings),
        shell:
            script_job("calibrate", "{resources.tuning}")

else:

    rule calibrate:
        output:
            "results/calibration/no_calibration_samples",
        log:
            "logs/calibrate.log",
        localrule: True
        conda:
            "../envs/cpu.yaml"
        params:
            message="calibration.samples: the calibrate target needs a sheet of samples labelled virus or other (docs/weighing.md)",
        shell:
            "echo {params.message:q} | tee {log:q} >&2; exit 1"

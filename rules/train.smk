# The train target learns from the samples labelled virus or other. A sheet that labels none has
# no train job: models.classifier is then a file given as it is, even at the train output's path.
if SAMPLES.labelled:

    rule train:
        input:
            training_embeddings,
        output:
            classifier=config["train"]["classifier"],
            calibration=config["train"]["calibration"],
            metrics="results/train/metrics.json",
        log:
            "logs/train.log",
        benchmark:
            "results/benchmarks/train.tsv"
        conda:
            "../envs/cpu.yaml"
        # train holds the training samples' features once, as float32 (twice their size on disk
        # when stored as float16), and a copy of the validation rows (benchmarks/train_memory.py:
        # 1.35 times the features at its peak); time grows with them, and with the trainings that
        # cross-fit the calibration (train.calibration_folds, each on most of the features)
        resources:
            mem_mb=by_input(4000, 3 * 1024),
            runtime=by_input(120, 10 * (1 + config["train"]["calibration_folds"])),
            tuning=tuning_of(TrainSettings),
        params:
            files=named_files,
            shards=labelled_shards,
            settings=settings_of(TrainSettings),
        shell:
            script_job(
                "train",
                "{params.files} {params.shards} {params.settings} {resources.tuning} --threads {threads}",
            )

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
            message=f"{config['samples']}: the train target needs samples labelled virus or other in a label column",
        shell:
            "echo {params.message:q} | tee {log:q} >&2; exit 1"

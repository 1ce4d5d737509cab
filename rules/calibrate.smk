# The calibrate target fits a calibration for models.classifier from the labelled samples of
# calibration.samples (docs/weighing.md): they are prepared, embedded and scored like any sample,
# and read from their scores, never called.
if len(SAMPLES.calibration):

    rule calibrate:
        input:
            # read as the samples' --sample options
            lambda wildcards: [f for files in calibration_inputs() for f in files],
            MODEL_CHECK,
        output:
            calibration="results/calibration/calibration.json",
        log:
            "logs/calibrate.log",
        benchmark:
            "results/benchmarks/calibrate.tsv"
        conda:
            "../envs/cpu.yaml"
        # holds a score and a label per chunk of the calibration samples (tens of bytes a chunk) and
        # fits on them: 10^6 chunks take about 2 GB and well under a minute (docs/performance.md)
        resources:
            mem_mb=by_input(2000, 200),
            runtime=by_input(30, 10),
            tuning=tuning_of(CalibrateSettings),
        params:
            files=named_files,
            samples=lambda wildcards: cli(
                sample=[
                    (s, SAMPLES.calibration.loc[s, "label"], *files)
                    for s, files in zip(
                        SAMPLES.calibration.index, calibration_inputs()
                    )
                ]
            ),
            settings=settings_of(CalibrateSettings),
        shell:
            script_job(
                "calibrate",
                "{params.files} {params.samples} {params.settings} {resources.tuning}",
            )

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

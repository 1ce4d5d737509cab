# Everything a run downloads, verified, into models.cache_dir, where the jobs look for it: the target
# to run on a machine with internet before a run whose jobs have none (docs/cluster.md).
rule fetch_models:
    input:
        model_files.fetched(SETTINGS),
        model_files.fetched_classifier(SETTINGS),
    localrule: True


# The configured embedding models that are named (fair-esm, the Hugging Face Hub).
rule fetch_embedding_models:
    output:
        model_files.fetched_manifest(SETTINGS),
    log:
        "logs/fetch_embedding_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    resources:
        tuning=tuning_of(FetchSettings),
    params:
        args=job_args(
            model_files.embedder_options(SETTINGS, fetched=True),
            checksums=model_files.pins(SETTINGS, classifier=False),
            settings=FetchSettings,
        ),
    shell:
        script_job("fetch_models", "{resources.tuning}")


# A classifier given by URL, checked against the models once it is downloaded; the default target
# names it, so that this runs first. Not after the model check: a check run again (a model changed)
# downloads nothing, and a classifier swap reruns this and the scores, not the check or the plan.
rule fetch_classifier:
    input:
        model_files.fetched(SETTINGS),  # a local checkpoint is read, unnamed: one replaced downloads nothing
    output:
        model_files.fetched_classifier(SETTINGS),
    log:
        "logs/fetch_classifier.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    resources:
        tuning=tuning_of(FetchClassifierSettings),
    params:
        args=job_args(checksums=model_files.pins(SETTINGS, classifier=True), settings=FetchClassifierSettings),
        checks=model_files.classifier_checks(SETTINGS),
    shell:
        script_job("fetch_classifier", "{resources.tuning}")


rule check_models:
    input:
        model_files.local_checkpoints(SETTINGS),
        model_files.fetched(SETTINGS),
    output:
        model_check=MODEL_CHECK,
    log:
        "logs/check_models.log",
    benchmark:
        "results/benchmarks/check_models.tsv"
    localrule: True
    conda:
        "../envs/embed.yaml"
    resources:
        env=model_files.model_env(SETTINGS),
    params:
        files=named_files,
        args=job_args(EMBEDDER_OPTIONS, settings=CheckModelsSettings),
        classifier=model_files.classifier_to_check(SETTINGS, TRAINS_HERE),
    shell:
        script_job("check_models", env="{resources.env}")


rule build_demo_models:
    input:
        # the tokenizer is trained on this bundled genome, wherever the workflow runs
        genome=f"{ROOT}/resources/genomes/lambda_NC_001416.fasta",
    output:
        "resources/demo_models/esm2_t2_demo-contact-regression.pt",  # written with esm's
        esm="resources/demo_models/esm2_t2_demo.pt",
        dnabert=directory("resources/demo_models/dnabert_s_demo"),
    log:
        "logs/build_demo_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        files=named_files,
        args=job_args(seed=0),
    shell:
        script_job("build_demo_models")

# The configured models (and a classifier given by URL) fetched into models.cache_dir, where the
# jobs look for them.
rule fetch_models:
    input:
        model_files.local_checkpoints(config),
    output:
        model_files.fetched_manifest(config),
        model_files.fetched_classifier(config),
    log:
        "logs/fetch_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    resources:
        tuning=tuning_of(FetchSettings),
    params:
        args=job_args(EMBEDDER_OPTIONS, model_files.classifier_to_fetch(config, TRAINS_HERE), settings=FetchSettings),
    shell:
        script_job("fetch_models", "{resources.tuning}")


# The embedding models' layers and sizes, and their files' checksums (which the embed jobs reuse):
# the plan and every tokenize and embed job wait for it.
rule check_models:
    input:
        model_files.local_checkpoints(config),
        model_files.fetched(config),
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
        env=model_files.model_env(config),
    params:
        files=named_files,
        args=job_args(EMBEDDER_OPTIONS, settings=CheckModelsSettings),
    shell:
        script_job("check_models", env="{resources.env}")


# The classifier against the models (unless this run trains it: it then fits by construction), a
# check of its own, so that a classifier swap reruns it and the scoring, never the model check that
# the embeddings wait for. A new generation's plan waits for it (RunPlan.check), so that a wrong
# classifier stops a run before its embeddings.
rule check_classifier:
    input:
        model_check=MODEL_CHECK,
        classifier=model_files.classifier_file(config),
    output:
        classifier_check=CHECKED_CLASSIFIER,
    log:
        "logs/check_classifier.log",
    priority: PRIORITY["check"]
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        files=named_files,
        args=job_args(settings=CheckClassifierSettings),
    shell:
        script_job("check_classifier")


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

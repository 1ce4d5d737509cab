rule fetch_models:
    input:
        model_files.local_checkpoints(config),
    output:
        # in models.cache_dir, where the jobs look for them
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
        embedders=model_files.embedder_options(config),
        settings=settings_of(FetchSettings),
        classifier=model_files.classifier_to_fetch(config, TRAINS_HERE),
    shell:
        script_job(
            "fetch_models",
            "{params.embedders} {params.settings} {params.classifier} {resources.tuning}",
        )


rule check_models:
    input:
        model_files.local_checkpoints(config),
        model_files.fetched(config),
        classifier=model_files.classifier_to_check(config, TRAINS_HERE),
    output:
        model_check=MODEL_CHECK,
    log:
        "logs/check_models.log",
    benchmark:
        "results/benchmarks/check_models.tsv"
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        files=named_files,
        embedders=model_files.embedder_options(config),
        settings=settings_of(CheckModelsSettings),
        env=model_files.offline_env(config),
    shell:
        script_job(
            "check_models",
            "{params.files} {params.embedders} {params.settings}",
            env="{params.env}",
        )


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
    shell:
        script_job("build_demo_models", "{params.files} --seed 0")

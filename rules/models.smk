rule fetch_models:
    input:
        models=model_files.local_checkpoints(config),
    output:
        manifest=model_files.fetched_manifest(config),
        classifier=model_files.fetched_classifier(config),
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
        models=model_files.local_checkpoints(config),
        classifier=model_files.classifier_to_check(config, TRAINS_HERE),
        fetched=model_files.fetched(config),
    output:
        MODEL_CHECK,
    log:
        "logs/check_models.log",
    benchmark:
        "results/benchmarks/check_models.tsv"
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        embedders=model_files.embedder_options(config),
        settings=settings_of(CheckModelsSettings),
        classifier=lambda wildcards, input: cli(classifier=input.classifier or None),
        env=model_files.offline_env(config),
    shell:
        script_job(
            "check_models",
            "{params.embedders} {params.settings} {params.classifier} --output {output:q}",
            env="{params.env}",
        )


rule build_demo_models:
    input:
        # the tokenizer is trained on this bundled genome, wherever the workflow runs
        f"{ROOT}/resources/genomes/lambda_NC_001416.fasta",
    output:
        esm="resources/demo_models/esm2_t2_demo.pt",
        regression="resources/demo_models/esm2_t2_demo-contact-regression.pt",
        dnabert=directory("resources/demo_models/dnabert_s_demo"),
    log:
        "logs/build_demo_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    shell:
        script_job(
            "build_demo_models",
            "--esm {output.esm:q} --dnabert {output.dnabert:q} --genome {input:q} --seed 0",
        )

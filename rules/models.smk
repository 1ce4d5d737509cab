rule fetch_models:
    input:
        models=model_files(),
    output:
        manifest=fetched_manifest(),
        classifier=fetched_classifier(),
    log:
        "logs/fetch_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    resources:
        progress_seconds=runtime(config["progress_seconds"]),
    params:
        logged=RUN_LOGGED,
        script=script("fetch_models"),
        settings=fetch_models_args,
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} {params.settings} "
        "--progress-seconds {resources.progress_seconds}"


rule check_models:
    input:
        models=model_files(),
        classifier=classifier_to_check(),
        fetched=fetched(),
    output:
        MODEL_CHECK,
    log:
        "logs/check_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        logged=RUN_LOGGED,
        script=script("check_models"),
        settings=check_models_args,
        env=offline_env(),
    shell:
        "bash {params.logged:q} {log:q} env {params.env} python {params.script:q} {params.settings} --output {output:q}"


rule build_demo_models:
    input:
        DEMO_TOKENIZER_GENOME,
    output:
        esm="resources/demo_models/esm2_t2_demo.pt",
        regression="resources/demo_models/esm2_t2_demo-contact-regression.pt",
        dnabert=directory("resources/demo_models/dnabert_s_demo"),
    log:
        "logs/build_demo_models.log",
    localrule: True
    conda:
        "../envs/embed.yaml"
    params:
        logged=RUN_LOGGED,
        script=script("build_demo_models"),
    shell:
        "bash {params.logged:q} {log:q} python {params.script:q} --esm {output.esm:q} --dnabert {output.dnabert:q} "
        "--genome {input:q} --seed 0"

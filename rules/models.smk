rule check_models:
    input:
        models=model_files(),
        classifier=classifier_to_check(),
    output:
        MODEL_CHECK,
    log:
        "logs/check_models.log",
    conda:
        "../envs/embed.yaml"
    params:
        args=check_models_args,
    localrule: True
    shell:
        "python {workflow.basedir}/scripts/check_models.py {params.args} --output {output} > {log} 2>&1"


rule build_demo_models:
    input:
        "resources/genomes/lambda_NC_001416.fasta",
    output:
        esm="resources/demo_models/esm2_t2_demo.pt",
        regression="resources/demo_models/esm2_t2_demo-contact-regression.pt",
        dnabert=directory("resources/demo_models/dnabert_s_demo"),
    log:
        "logs/build_demo_models.log",
    conda:
        "../envs/embed.yaml"
    localrule: True
    shell:
        "python {workflow.basedir}/scripts/build_demo_models.py --outdir resources/demo_models --genome {input} > {log} 2>&1"

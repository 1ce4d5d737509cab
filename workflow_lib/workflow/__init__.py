"""What the Snakemake workflow needs beyond the jobs: the start-up (config checks, patches of
Snakemake's scheduler, the samples), the model files a run uses, the rules' shell commands, job
resources and output flags, the config reference and the cluster watch.

May import every package; only the rules and scripts import it."""

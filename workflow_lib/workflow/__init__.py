"""What the Snakemake workflow needs beyond the jobs: config checks at start-up, the config
reference, job resources, the cluster watch, patches of Snakemake's scheduler, fetching, checking
and building (demo) models.

May import every package but harness; only the rules and scripts import it."""

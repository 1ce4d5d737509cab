"""The report: its data read from a run's tables, the figures and pages drawn from them, each
sample's run summary, and the comparison of a run's calls with VirNucPro's own outputs.

May import: cli, io, models, prepare, classify, training."""

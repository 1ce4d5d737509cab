"""The report: its data read from a run's tables, the figures and pages drawn from them, and each
sample's run summary.

May import: cli, io, models, prepare, classify."""

"""From embeddings to calls: scoring shards with the classifier, per-sample prediction tables,
calibration and the weighing of calls (probabilities, q-values, reliability), regions, training,
and the comparison with VirNucPro's own outputs.

May import: cli, io, models, prepare."""

"""From embeddings to calls: scoring shards with the classifier, the per-sample prediction tables
(frames, chunks, sequences, regions) and the weighing of calls with a calibration (its fits and
file, probabilities, q-values, reliability). Learning a classifier or a calibration is `training`'s.

May import: cli, io, models, prepare."""

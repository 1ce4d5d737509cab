"""What the train and calibrate targets learn from labelled samples: VirNucPro's classifier trained
on their embeddings (with a calibration from held-out folds), and a calibration fitted for any
classifier on its scored chunks.

May import: cli, io, models, prepare, classify."""

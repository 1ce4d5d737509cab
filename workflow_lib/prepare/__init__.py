"""From input reads to shards: chunking, six-frame translation, unique record IDs, reconciling
VirNucPro's frames with ours, the prepare job, and the run's plan of pooled shards.

May import: cli, io."""

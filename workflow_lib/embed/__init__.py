"""The embed job: a shard's tokens read by loader workers, packed greedily into batches, fed to
the device, and its rows committed as they come, so that a stopped job resumes.

May import: cli, io, models."""

"""What a job asks of the machine (threads, GPUs, minutes), from the config and its shard: one
shard's work, whatever the sample's size. The rules call these (rules/common.smk)."""

TOKENIZE_TOKENS_PER_S = 500_000  # one core tokenises 2.25 M shard tokens a second: a margin of 4.5
EMBED_START_MINUTES = 10  # model load, worker start-up, a kernel compile
EMBED_MARGIN = 1.5  # on the assumed rate


# A sample of at most this much input (about 2 M reads of 500 bp) is small: its CPU jobs take
# seconds to a few minutes, so a cluster run batches many samples' jobs into one submission.
SMALL_SAMPLE_BYTES = 1 << 30


def small_sample(input_bytes: int) -> bool:
    return input_bytes <= SMALL_SAMPLE_BYTES


def tokenize_minutes(tokens: int) -> int:
    """2 minutes, plus the shard's tokens (its ESM-2 count; DNABERT-S's are about as many)."""
    return _minutes(2 + tokens / TOKENIZE_TOKENS_PER_S / 60)


def embed_gpus(frames: int) -> int:
    """One GPU, or none for a shard with no frames (its job only writes the empty file)."""
    return 1 if frames else 0


def embed_minutes(tokens: int, frames: int, model: str, embedding: dict) -> int:
    """The start, plus EMBED_MARGIN times the shard's ESM-2 tokens at the assumed rate of this
    model on this device (embedding.assumed_tokens_per_s, embedding.device)."""
    on_cpu = embedding["device"] == "cpu" or not frames
    rate = embedding["assumed_tokens_per_s"][model]["cpu" if on_cpu else "cuda"]
    return _minutes(EMBED_START_MINUTES + EMBED_MARGIN * tokens / rate / 60)


def embed_threads(embedding: dict) -> int:
    """The main process and its loader workers. auto asks for 2 workers: they pack tens of
    thousands of frames a second, far more than a GPU embeds, and leave cores for other jobs."""
    workers = embedding["num_workers"]
    return (2 if workers == "auto" else workers) + 1


def _minutes(minutes: float) -> int:
    return int(minutes + 0.999)

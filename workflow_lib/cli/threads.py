"""The CPU threads of a job. torch uses exactly the job's: float sums split over another number of
threads round differently, and a local run and a cluster run must give the same tables."""


def use_threads(threads: int) -> None:
    import torch  # not at the top: the CLIs parse their arguments before torch's seconds of import

    torch.set_num_threads(threads)

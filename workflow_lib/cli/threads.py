"""The CPU threads of a job. torch uses exactly the job's: float sums split over another number of
threads round differently, so a job run again on as many CPUs gives its tables to the byte (on
fewer, as Snakemake's --cores may give it, its scores may move in their last digit)."""


def use_threads(threads: int) -> None:
    import torch  # not at the top: the CLIs parse their arguments before torch's seconds of import

    torch.set_num_threads(threads)

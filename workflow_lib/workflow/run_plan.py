"""The rules' view of the run's plan (workflow_lib/prepare/plan.py), as input, params and resource
functions: each sample's shards, and what the jobs of each pooled shard read and ask for."""

import re

from snakemake.exceptions import IncompleteCheckpointException
from snakemake.io import ancient, expand

from workflow_lib.cli.settings import cli
from workflow_lib.io import sharding
from workflow_lib.prepare.plan import read_plan, read_pools
from workflow_lib.workflow import job_resources


class RunPlan:
    """Bound to the workflow's `rules` and `checkpoints` (looked up when a job asks, once the rules exist)."""

    def __init__(
        self, rules, checkpoints, samples, embedders: dict, config: dict, trains_here: bool, model_check, gpu_model
    ):
        self.rules, self.checkpoints, self.samples = rules, checkpoints, samples
        self.embedders, self.config, self.trains_here, self.model_check = embedders, config, trains_here, model_check
        self.gpu_model = gpu_model  # the profile's for embed jobs (job_resources.profile_gpu_model)

    def shards(self, sample: str) -> list[dict]:
        """A sample's pieces of shards (plan rows), by pool; a plan lacking the sample predates it: not
        made yet."""
        plan_file = self.checkpoints.plan.get(generation=self.samples.generation[sample]).output.plan
        plan = read_plan(plan_file)
        if sample not in plan:
            raise IncompleteCheckpointException(self.checkpoints.plan.rule, plan_file)
        return plan[sample]

    def shard_outputs(self, output, sample: str, **wildcards) -> list[str]:
        """An output of the pooled shard of each of a sample's pieces of shards, in the plan's order."""
        return expand(output, pool=[s["pool"] for s in self.shards(sample)], **wildcards)

    def sample_pools(self, output, sample: str, **wildcards) -> list[str]:
        return list(dict.fromkeys(self.shard_outputs(output, sample, **wildcards)))

    def plan(self, wildcards):
        """The plan of a pooled shard's generation, as an input: cluster jobs evaluate params that read
        a checkpoint only with its output among the inputs; ancient: a plan made again does not make
        the pooled shards it leaves alone again."""
        generation = wildcards.pool.split("-")[0]
        return ancient(expand(self.rules.plan.output.plan, generation=generation)[0])

    def pieces(self, pool: str) -> list[dict]:
        """A pooled shard's pieces of samples' shards (plan rows)."""
        generation = pool.split("-")[0]
        return read_pools(self.checkpoints.plan.get(generation=generation).output.plan)[pool]

    def work(self, wildcards) -> dict:
        """A pooled shard's frames and ESM-2 tokens, from the plan (not the job's input, which a
        dry run may not have)."""
        pieces = self.pieces(wildcards.pool)
        return {key: sum(p[key] for p in pieces) for key in ("frames", "tokens")}

    def tokenize_runtime(self, wildcards) -> int:
        return job_resources.tokenize_minutes(self.work(wildcards)["tokens"])

    def embed_gpus(self, wildcards) -> int:
        """One GPU, or none for a shard with no frames (its job only writes the empty file)."""
        return 1 if self.work(wildcards)["frames"] else 0

    def embed_gpu_mem(self, wildcards, input) -> int:
        """Known once the job's input exists (a dry run shows <TBD>), and so the model check before it."""
        return job_resources.embed_gpu_mem_mb(wildcards.model, self.model_check, self.config)

    def embed_runtime(self, wildcards) -> int:
        rate = job_resources.embed_rate(wildcards.model, self.model_check, self.config, self.gpu_model)
        return job_resources.embed_minutes(self.work(wildcards)["tokens"], rate)

    def planned_frames(self, wildcards) -> int:
        """The pooled shard's frames by the plan, which its embed job checks the FASTA against (one
        cut short by a crash is refused): a resource, never compared."""
        return self.work(wildcards)["frames"]

    def planned_tokens(self, wildcards) -> int:
        """The pooled shard's ESM-2 tokens by the plan: the unit of the rate its embed job records."""
        return self.work(wildcards)["tokens"]

    def embed_priority(self, wildcards) -> int:
        try:
            pooled = {p["sample"] for p in self.pieces(wildcards.pool)}
        except IncompleteCheckpointException:
            # asked for before the plan exists: made again once it is (a priority function may not raise)
            return job_resources.embed_priority(wildcards.pool, False)
        labelled = (self.samples.table.loc[list(pooled), "label"] != "").any()
        return job_resources.embed_priority(wildcards.pool, self.trains_here and labelled)

    def whole_shard(self, pool: str) -> dict | None:
        """The piece of a pooled shard that is all of it and all of its shard: its jobs read prepare's shard."""
        pieces = self.pieces(pool)
        whole = len(pieces) == 1 and (pieces[0]["first_bin"], pieces[0]["end_bin"]) == (0, sharding.BINS)
        return pieces[0] if whole else None

    def fasta_pair(self, wildcards) -> list[str]:
        """What a pooled shard's jobs read: prepare's shards directory, or pool_shard's FASTA pair."""
        if piece := self.whole_shard(wildcards.pool):
            return expand(self.rules.prepare.output.shards, sample=piece["sample"])
        return expand(list(self.rules.pool_shard.output), pool=wildcards.pool)

    def fasta(self, pool: str, suffix: str) -> str:
        """A pooled shard's nucleotide (`fna`) or protein (`faa`) FASTA (see fasta_pair)."""
        if piece := self.whole_shard(pool):
            shards = expand(self.rules.prepare.output.shards, sample=piece["sample"])[0]
            return str(sharding.shard_fasta(shards, piece["shard"], suffix))
        return expand(getattr(self.rules.pool_shard.output, suffix), pool=pool)[0]

    def model_fasta(self, wildcards) -> str:
        return self.fasta(wildcards.pool, self.embedders[wildcards.model].declared.alphabet)

    def spent_fasta(self, wildcards) -> tuple[str, str]:
        """The score job's --shard-fasta: removed once scored unless the embeddings are kept."""
        return tuple(self.fasta(wildcards.pool, suffix) for suffix in ("fna", "faa"))

    def shard_dirs(self, wildcards) -> list[str]:
        """pool_shard's input: the shards directory and bins file of each sample of the pooled shard."""
        samples = list(dict.fromkeys(p["sample"] for p in self.pieces(wildcards.pool)))
        return expand([self.rules.prepare.output.shards, self.rules.prepare.output.bins], sample=samples)

    def pool_pieces(self, wildcards) -> str:
        """pool_shard's --piece per piece: its shards directory, bins file, shard and bins, in plan order."""
        output = self.rules.prepare.output
        return cli(
            piece=[
                (*expand([output.shards, output.bins], sample=p["sample"]), p["shard"], p["first_bin"], p["end_bin"])
                for p in self.pieces(wildcards.pool)
            ]
        )

    def scored_pieces(self, wildcards) -> str:
        """The score job's --piece per sample's shard of its pooled shard: sample, shard, frames."""
        return cli(piece=[(p["sample"], p["shard"], p["frames"]) for p in self.pieces(wildcards.pool)])

    def stored_tokens(self, wildcards) -> list[str]:
        if self.embedders[wildcards.model].declared.stored_tokens:
            return expand(self.rules.tokenize.output.tokens, **wildcards)
        return []

    def tokenized_models(self) -> str:
        stored = [m for m, e in self.embedders.items() if e.declared.stored_tokens]
        return "|".join(map(re.escape, stored)) or "^$"

    def embeddings(self, wildcards) -> list[str]:
        """A pooled shard's embeddings by each model, in input order: the score rule's input."""
        return [expand(self.rules.embed.output.embeddings, model=m, pool=wildcards.pool)[0] for m in self.embedders]

"""Token-balanced shards: each frame goes to the shard with the fewest ESM-2 tokens so far."""

import heapq


class ShardBalancer:
    """Greedy least-loaded assignment; ties go to the lowest shard index, so it is deterministic."""

    def __init__(self, shards: int):
        self.heap = [(0, i) for i in range(shards)]
        self.tokens = [0] * shards

    def assign(self, tokens: int) -> int:
        load, shard = self.heap[0]
        heapq.heapreplace(self.heap, (load + tokens, shard))
        self.tokens[shard] = load + tokens
        return shard

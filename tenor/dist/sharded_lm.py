"""One rank's forward of a tensor-parallel decoder.

The rank's model is an ordinary `DecoderLM` built with its local shapes (see shard_plan); this
wrapper adds the communication: the row-parallel linears (attention out, MLP down) all-reduce
through `ParallelLinear`'s reduce hook, the vocab-parallel embedding is summed across ranks,
and the vocab-parallel logits are gathered on the leader only.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from tenor.dist.shard_plan import RankShard
from tenor.models.decoder import DecoderLM
from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear

ROW_PARALLEL = ("o", "down", "fc_out")


class ShardedLM(nn.Module):
    def __init__(self, local: DecoderLM, shard: RankShard, vocab_size: int, group) -> None:
        super().__init__()
        self.local = local
        self.shard = shard
        self.vocab_size = vocab_size
        self.group = group
        self.native_kernels = getattr(local, "native_kernels", False)
        for block in local.layers:
            for name in ROW_PARALLEL:
                layer = getattr(block, name, None)
                if isinstance(layer, ParallelLinear):
                    layer._reduce = self._all_reduce

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        out = self.group.all_reduce(x)
        self.group.collective_s += time.perf_counter() - started
        self.group.collective_calls += 1
        return out

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: PagedKVCache,
        batch: AttentionBatch,
        logits_rows: torch.Tensor,
    ) -> torch.Tensor | None:
        """float32 logits [R, V] on the leader; None on workers."""
        m = self.local
        local_ids = input_ids - self.shard.vocab.start
        outside = (local_ids < 0) | (local_ids >= len(self.shard.vocab))
        x = m.embed_rows(local_ids.masked_fill(outside, 0)).masked_fill(outside[:, None], 0.0)
        x = self._all_reduce(x)
        cos, sin = m.rotary.tables(positions)
        for block in m.layers:
            x = block(x, m.rotary, cos, sin, cache, batch)
        local_logits = m.lm_head(m.final_norm(x.index_select(0, logits_rows)), decoding=True).float()
        started = time.perf_counter()
        parts = self.group.gather_to_leader(local_logits)
        self.group.collective_s += time.perf_counter() - started
        self.group.collective_calls += 1
        if parts is None:
            return None
        return torch.cat(parts, dim=-1)[:, : self.vocab_size]

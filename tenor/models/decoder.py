"""What every decoder-only family shares: embed, run the blocks, norm the rows that need
logits, project to the vocabulary. Families supply their blocks and final norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tenor.models.block_weights import Blocks
from tenor.models.config import ModelConfig
from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear, Rotary


class DecoderLM(nn.Module):
    config: ModelConfig
    embed: nn.Parameter
    embed_blocks: Blocks | None = None  # the embedding in its GGUF blocks, in place of `embed`
    layers: nn.ModuleList
    lm_head: ParallelLinear
    rotary: Rotary
    native_kernels: bool = False  # run tenor's fused float32 kernels (set by build_model)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The tokens' embeddings [T, D], a fresh tensor (the layers may run in place on it)."""
        if self.embed_blocks is not None:
            return self.embed_blocks.rows(input_ids)
        return F.embedding(input_ids, self.embed)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: PagedKVCache,
        batch: AttentionBatch,
        logits_rows: torch.Tensor,
    ) -> torch.Tensor:
        """Runs the step's tokens [T]; returns float32 logits [R, V] for the rows in `logits_rows`."""
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary.tables(positions)
        for block in self.layers:
            x = block(x, self.rotary, cos, sin, cache, batch)
        x = self.final_norm(x.index_select(0, logits_rows))
        return self.lm_head(x).float()

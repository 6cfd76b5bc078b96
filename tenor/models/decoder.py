"""What every decoder-only family shares: embed, run the blocks, norm the rows that need
logits, project to the vocabulary. Families supply their blocks and final norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tenor.models.block_weights import PackedWeight
from tenor.models.config import ModelConfig
from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear, Rotary


def lookup_table(table: torch.Tensor, dtype: torch.dtype, kept_by_head: bool) -> torch.Tensor:
    """The float embedding table rows are looked up from, for a model computing in `dtype`.

    A 16-bit float table (a bf16 or fp16 checkpoint's) stays 16-bit under float32 activations on
    the CPU: each looked-up row widens exactly, and the table takes half the bytes (0.5 GB less
    for Llama 3.2 1B's 128256 x 2048). Not where a tied LM head keeps the float32 table as its
    own weight (`kept_by_head`, float weights): lookups share that one instead."""
    narrow = table.dtype in (torch.bfloat16, torch.float16) and table.device.type == "cpu"
    if narrow and dtype == torch.float32 and not kept_by_head:
        return table.contiguous()
    return table.to(dtype)


class DecoderLM(nn.Module):
    config: ModelConfig
    embed: nn.Parameter  # may be narrower than compute_dtype (`lookup_table`): rows widen as looked up
    embed_blocks: PackedWeight | None = None  # the embedding as its GGUF holds it, in place of `embed`
    compute_dtype: torch.dtype = torch.float32  # the activations' (set by load_weights)
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
        return self.embed_rows(input_ids)

    def embed_rows(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Rows of the float table `embed`, in compute_dtype."""
        return F.embedding(input_ids, self.embed).to(self.compute_dtype)

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
        return self.lm_head(x, decoding=True).float()  # each row a sequence's next token

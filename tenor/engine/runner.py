"""Carries out a StepPlan on the model: one forward over every token of the step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tenor.engine.scheduler import Chunk, StepPlan
from tenor.engine.sequence import Sequence
from tenor.models import native
from tenor.models.decoder import DecoderLM
from tenor.models.layers import AttentionBatch, PagedKVCache, PrefillSpan


@dataclass
class StepOutput:
    logits: torch.Tensor  # [R, V] float32, on the CPU (sampling runs there, whatever the device)
    rows: list[tuple[Sequence, int]]  # (sequence, position) each logits row predicts after


class ModelRunner:
    """Builds each step's inputs on the CPU, moves them to the cache's device in one go, and
    brings the logits back."""

    def __init__(self, model: DecoderLM, cache: PagedKVCache) -> None:
        self.model = model
        self.cache = cache
        self.device = cache.device
        self.block_size = cache.block_size
        self._offsets = torch.arange(self.block_size)
        # Whether prompt rows attend through tenor's kernel (float32 activations, where it pays):
        # then every row of a step with prompt chunks gets its own block table.
        self._prompt_rows_native = model.native_kernels and cache.dtype == torch.float32 and native.prompt_rows_pay()

    @torch.inference_mode()
    def run(self, plan: StepPlan) -> StepOutput:
        decodes = [c for c in plan.chunks if c.is_decode]
        prefills = [c for c in plan.chunks if not c.is_decode]
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        rows: list[tuple[Sequence, int]] = []
        logits_rows: list[int] = []
        for chunk in decodes + prefills:
            base = len(ids)
            seq, start, end = chunk.seq, chunk.start, chunk.start + chunk.length
            ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            slots.extend(self._slot(seq.block_table, p) for p in range(start, end))
            for pos in seq.wants_logits_rows(start, chunk.length):
                logits_rows.append(base + pos - start)
                rows.append((seq, pos))
        batch = AttentionBatch(
            slot_mapping=torch.tensor(slots),
            num_decode=len(decodes),
            decode_blocks=None,
            decode_mask=None,
            prefills=[],
            native=self.model.native_kernels,
        )
        if decodes:
            batch.decode_blocks, batch.decode_mask = self._decode_context(decodes)
            batch.decode_span = max(c.start + 1 for c in decodes)
            batch.decode_lengths = torch.tensor([c.start + 1 for c in decodes])
        if prefills and self._prompt_rows_native:
            batch.row_blocks, batch.row_lengths = self._row_context(decodes + prefills)
            batch.row_span = int(batch.row_lengths.max())
        offset = len(decodes)
        for chunk in prefills:
            context = None
            if chunk.start > 0:
                context = self._context_slots(chunk.seq.block_table, chunk.start + chunk.length)
            batch.prefills.append(PrefillSpan(offset, chunk.length, chunk.start, context))
            offset += chunk.length
        inputs = [torch.tensor(ids), torch.tensor(positions), torch.tensor(logits_rows, dtype=torch.long)]
        if self.device.type != "cpu":
            inputs = [t.to(self.device, non_blocking=True) for t in inputs]
            batch = batch.to(self.device)
        input_ids, input_positions, rows_index = inputs
        logits = self.model(input_ids, input_positions, self.cache, batch, rows_index)
        return StepOutput(logits.cpu(), rows)

    def _slot(self, block_table: list[int], position: int) -> int:
        return block_table[position // self.block_size] * self.block_size + position % self.block_size

    def _context_slots(self, block_table: list[int], length: int) -> torch.Tensor:
        blocks = torch.tensor(block_table[: -(-length // self.block_size)])
        return (blocks[:, None] * self.block_size + self._offsets).reshape(-1)[:length]

    def _row_context(self, chunks: list[Chunk]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's KV blocks [T, N] and context length [T]: a chunk's rows share its sequence's
        blocks, and its row for position p sees positions 0..p."""
        table = self._block_tables(chunks, max(c.start + c.length for c in chunks))
        lengths = [torch.arange(c.start + 1, c.start + c.length + 1) for c in chunks]
        return table.repeat_interleave(torch.tensor([c.length for c in chunks]), dim=0), torch.cat(lengths)

    def _block_tables(self, chunks: list[Chunk], longest: int) -> torch.Tensor:
        """[len(chunks), N] each chunk's sequence's first N blocks, N enough for `longest` tokens,
        zero-padded."""
        num_blocks = -(-longest // self.block_size)
        rows = [chunk.seq.block_table[:num_blocks] for chunk in chunks]
        # one tensor from padded lists: a tensor per row took 4-5x as long (~0.2 ms at 32 streams)
        return torch.tensor([row + [0] * (num_blocks - len(row)) for row in rows], dtype=torch.long).view(
            len(chunks), num_blocks
        )

    def _decode_context(self, decodes: list[Chunk]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """KV blocks [B, N] of each decoding sequence's context, and the mask [K * B, 1, N * block]
        of slots that hold context (None when every context has the same length)."""
        lengths = [c.start + 1 for c in decodes]
        table = self._block_tables(decodes, max(lengths))
        if min(lengths) == max(lengths):  # e.g. a single stream: no mask, the tail is cut
            return table, None
        span = table.shape[1] * self.block_size
        mask = torch.arange(span)[None, :] < torch.tensor(lengths)[:, None]  # [B, S]
        return table, mask.repeat(self.cache.num_kv_heads, 1)[:, None, :]

"""What the leader tells its workers, as tensors broadcast from rank 0 (never pickle).

Every message is two broadcasts: a header [kind, length] and an int64 payload of `length`.
A STEP's payload is the step plan: the tokens, their positions and cache slots, the rows that
want logits, the decode sequences' block tables (the leader's; the same on every rank) and
mask, and the prefill spans. LOAD carries a JSON document (which model, how big a KV cache).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

import torch

from tenor.models.layers import AttentionBatch, PrefillSpan

# What a CACHE message's last field names: the K/V storage dtype, the same on every rank as in one
# process (bf16 beside int8 weights), so that a group's tokens equal one process's.
KV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class Kind(enum.IntEnum):
    HEARTBEAT = 0  # the leader is alive and idle (keeps workers' collective timeouts from firing)
    LOAD = 1
    STEP = 2
    STOP = 3
    CACHE = 4  # allocate the paged KV cache: [num_blocks, block_size, quantized, KV_DTYPES index]
    UNLOAD = 5  # drop the model and its cache; wait for the next LOAD


@dataclass
class StepInputs:
    """The arguments of one forward, as every rank needs them."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    batch: AttentionBatch
    logits_rows: torch.Tensor


def send(group, kind: Kind, payload: torch.Tensor | None = None) -> None:
    length = 0 if payload is None else payload.numel()
    group.broadcast(torch.tensor([int(kind), length], dtype=torch.int64))
    if payload is not None and length:
        group.broadcast(payload.to(torch.int64).contiguous())


def receive(group) -> tuple[Kind, torch.Tensor]:
    header = group.broadcast(torch.zeros(2, dtype=torch.int64))
    kind, length = Kind(int(header[0])), int(header[1])
    payload = torch.zeros(length, dtype=torch.int64)
    if length:
        group.broadcast(payload)
    return kind, payload


def encode_json(document: dict) -> torch.Tensor:
    return torch.tensor(list(json.dumps(document).encode()), dtype=torch.int64)


def decode_json(payload: torch.Tensor) -> dict:
    return json.loads(bytes(payload.to(torch.uint8).tolist()).decode())


HEADER = 9  # counts and sizes that lead a STEP payload


def encode_step(step: StepInputs) -> torch.Tensor:
    b = step.batch
    blocks = b.decode_blocks if b.decode_blocks is not None else torch.zeros(0, 0, dtype=torch.long)
    # decode_mask is [K * B, 1, S], kv-head major: its first B rows are the per-sequence mask.
    mask = b.decode_mask[: blocks.shape[0], 0] if b.decode_mask is not None else torch.zeros(0, 0, dtype=torch.bool)
    lengths = b.decode_lengths if b.decode_lengths is not None else torch.zeros(0, dtype=torch.long)
    header = [
        step.input_ids.numel(),
        step.logits_rows.numel(),
        b.num_decode,
        b.decode_span,
        blocks.shape[0],
        blocks.shape[1],
        mask.shape[1] if b.decode_mask is not None else -1,
        len(b.prefills),
        lengths.numel() if b.decode_lengths is not None else -1,
    ]
    spans: list[int] = []
    contexts: list[torch.Tensor] = []
    for span in b.prefills:
        n = -1 if span.context_slots is None else span.context_slots.numel()
        spans += [span.start, span.length, span.num_cached, n]
        if span.context_slots is not None:
            contexts.append(span.context_slots.reshape(-1))
    parts = [
        torch.tensor(header + spans, dtype=torch.int64),
        step.input_ids,
        step.positions,
        b.slot_mapping,
        step.logits_rows,
        blocks.reshape(-1),
        mask.reshape(-1),
        lengths.reshape(-1),
        *contexts,
    ]
    return torch.cat([p.to("cpu", torch.int64) for p in parts])  # a GPU leader's inputs are on its device


def decode_step(payload: torch.Tensor, num_kv_heads: int) -> StepInputs:
    """The forward's inputs on a worker; the decode mask is repeated for this rank's KV heads."""
    values = payload
    t, r, num_decode, span, nb, nblk, mask_len, num_prefills, num_lengths = values[:HEADER].tolist()
    at = HEADER
    spans = values[at : at + 4 * num_prefills].view(-1, 4).tolist() if num_prefills else []
    at += 4 * num_prefills

    def take(n: int) -> torch.Tensor:
        nonlocal at
        out = values[at : at + n]
        at += n
        return out

    ids, positions, slots, rows = take(t), take(t), take(t), take(r)
    blocks = take(nb * nblk).view(nb, nblk)
    mask = None
    if mask_len >= 0:
        mask = take(nb * mask_len).view(nb, mask_len).bool().repeat(num_kv_heads, 1)[:, None, :]
    lengths = take(num_lengths) if num_lengths >= 0 else None
    prefills = []
    for start, length, cached, n in spans:
        prefills.append(PrefillSpan(start, length, cached, None if n < 0 else take(n)))
    batch = AttentionBatch(
        slot_mapping=slots,
        num_decode=num_decode,
        decode_blocks=blocks if num_decode else None,
        decode_mask=mask,
        prefills=prefills,
        decode_span=span,
        decode_lengths=lengths,
    )
    return StepInputs(ids, positions, batch, rows)

"""The step plan survives its trip as one int64 tensor: decodes with a mask, prefills with and
without cached context; the mask is rebuilt for the receiving rank's KV heads."""

import torch

from tenor.dist.messages import (
    StepInputs,
    decode_json,
    decode_step,
    encode_json,
    encode_step,
)
from tenor.models.layers import AttentionBatch, PrefillSpan


def test_step_round_trip():
    lengths = torch.tensor([5, 3])
    mask = (torch.arange(16)[None, :] < lengths[:, None]).repeat(2, 1)[:, None, :]  # 2 KV heads on the leader
    batch = AttentionBatch(
        slot_mapping=torch.tensor([4, 18, 33, 34, 35, 50]),
        num_decode=2,
        decode_blocks=torch.tensor([[0], [1]]),
        decode_mask=mask,
        prefills=[PrefillSpan(2, 3, 0, None), PrefillSpan(5, 1, 2, torch.tensor([48, 49, 50]))],
        decode_span=5,
        decode_lengths=lengths,
    )
    step = StepInputs(
        torch.tensor([7, 8, 9, 10, 11, 12]), torch.tensor([4, 2, 0, 1, 2, 2]), batch, torch.tensor([0, 1, 4, 5])
    )
    got = decode_step(encode_step(step), num_kv_heads=1)
    assert torch.equal(got.input_ids, step.input_ids) and torch.equal(got.positions, step.positions)
    assert torch.equal(got.logits_rows, step.logits_rows)
    b = got.batch
    assert torch.equal(b.slot_mapping, batch.slot_mapping) and (b.num_decode, b.decode_span) == (2, 5)
    assert torch.equal(b.decode_blocks, batch.decode_blocks)
    assert torch.equal(b.decode_mask, mask[:2])  # this rank's one KV head
    assert torch.equal(b.decode_lengths, lengths)
    assert [(p.start, p.length, p.num_cached) for p in b.prefills] == [(2, 3, 0), (5, 1, 2)]
    assert b.prefills[0].context_slots is None and torch.equal(b.prefills[1].context_slots, torch.tensor([48, 49, 50]))


def test_json_round_trip():
    assert decode_json(encode_json({"servable": {"name": "x é"}, "checkpoint": None})) == {
        "servable": {"name": "x é"},
        "checkpoint": None,
    }

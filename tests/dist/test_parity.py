"""Sharded equals unsharded: a 2-rank group's greedy tokens equal the 1-process model's
(float32), batched and one at a time, for tiny random Llama (GQA, llama3 rope, uneven head
and MLP splits, padded vocabulary), tied Llama and GPT-J, and the default model."""

import pytest

from tenor.models.config import ModelConfig, RopeScaling
from tenor.registry import TINY_GPTJ, ServableConfig
from tests.dist.group_runs import greedy_tokens

PROMPTS = [
    [1, 72, 101, 108, 108, 111],
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
    [200],
    list(range(30, 70)),
]


def servable(name: str, model: ModelConfig) -> ServableConfig:
    # quantize none: float32 weights too. With auto, a CPU with native bf16 runs batches over 8 rows
    # in bf16, whose rounding differs between a rank's shard and the whole matrix.
    return ServableConfig(
        name,
        model,
        dtype="float32",
        quantize="none",
        max_batch_size=8,
        max_prefill_predict_length=256,
        max_target_length=512,
        tokenizer="bytes",
        random_weights=True,
        seed=7,
    )


LLAMA_GQA = ModelConfig(
    arch="llama",
    vocab_size=259,
    hidden_size=64,
    intermediate_size=130,
    num_layers=2,
    num_heads=6,
    num_kv_heads=3,
    head_dim=16,
    max_position_embeddings=512,
    rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64),
    bos_token_id=1,
    eos_token_ids=(2,),
)
LLAMA_TIED = ModelConfig(
    arch="llama",
    vocab_size=259,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
CASES = {
    "llama_gqa_llama3_rope": servable("test.tp.LlamaGQA", LLAMA_GQA),
    "llama_tied": servable("test.tp.LlamaTied", LLAMA_TIED),
    "gptj": servable("test.tp.GPTJ", TINY_GPTJ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_equal_one_process(case):
    model = CASES[case]
    expected, _ = greedy_tokens(model, PROMPTS, 32)
    batched, exits = greedy_tokens(model, PROMPTS, 32, group_size=2)
    assert batched == expected
    assert exits == [0]  # the worker left cleanly when the leader stopped it


def test_one_at_a_time_and_four_ranks(monkeypatch):
    import os

    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    model = CASES["llama_gqa_llama3_rope"]
    expected, _ = greedy_tokens(model, PROMPTS[:2], 16)
    alone, exits = greedy_tokens(model, PROMPTS[:2], 16, group_size=3, batched=False)
    assert alone == expected and exits == [0, 0]
    # The group gave this process a rank's share of the cores; it took it back on the way out.
    assert "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() == threads


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_default_model_32_tokens(quantize):
    """Float32 activations, with float32 weights or the default model's 4-bit blocks (`int8`: x
    to int16 per block). A rank quantizes its own slice, whose blocks of 32 are the whole
    matrix's (every slice of this model starts at a multiple of 32), and caches K/V as one
    process does (bf16 beside int8 weights), so only the order of the row-parallel sums differs.
    The three prompts go in one step (18 rows, the integer GEMM's) where big batches run exactly
    here; where they run as a bf16 GEMM (a CPU with native bf16), whose rounding of a rank's
    partial sums differs from the whole matrix's, one at a time (every step within the decode
    kernel's rows). Not `int8a8`: its int8 x turns those last-bit differences into whole steps
    of 1/127 of a block now and then (seen: one prompt of three diverging as AVX2 code)."""
    from tenor import registry
    from tenor.checkpoints.default_model import default_gguf_path
    from tenor.models import kernels

    path = default_gguf_path()
    model = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(
        dtype="float32", quantize=quantize, max_batch_size=4, max_prefill_predict_length=256, max_target_length=512
    )
    batched = quantize == "none" or not kernels.bf16_batches_apply()
    prompts = [[1, 504, 3575, 282, 4649, 314], [1, 1206, 28, 1069, 253, 1142], [1, 19842, 1326, 4398, 42]]
    expected, _ = greedy_tokens(model, prompts, 32, checkpoint=str(path), batched=batched)
    sharded, exits = greedy_tokens(model, prompts, 32, group_size=2, checkpoint=str(path), batched=batched)
    assert sharded == expected and exits == [0]


def test_sliced_from_a_tenor_checkpoint(tmp_path):
    import dataclasses

    from tenor.checkpoints.format import save_checkpoint
    from tenor.models.model import random_weights

    save_checkpoint(tmp_path / "ckpt", LLAMA_GQA, random_weights(LLAMA_GQA, 11))
    model = dataclasses.replace(CASES["llama_gqa_llama3_rope"], random_weights=False)
    expected, _ = greedy_tokens(model, PROMPTS, 16, checkpoint=str(tmp_path / "ckpt"))
    sharded, exits = greedy_tokens(model, PROMPTS, 16, group_size=2, checkpoint=str(tmp_path / "ckpt"))
    assert sharded == expected and exits == [0]

"""The shard plan: every weight row/column owned exactly once, heads in whole KV groups."""

import pytest

from tenor.dist.shard_plan import local_config, plan_shard, split_evenly, tensor_slice
from tenor.registry import LLAMA2_70B, SMOLLM2_135M, TINY_GPTJ


def test_split_evenly_covers_once():
    parts = [split_evenly(10, 3, i) for i in range(3)]
    assert parts == [range(4), range(4, 7), range(7, 10)]


def test_smollm2_on_two_ranks_splits_kv_groups_unevenly():
    a, b = plan_shard(SMOLLM2_135M, 2, 0), plan_shard(SMOLLM2_135M, 2, 1)
    assert (a.kv_heads, a.heads) == (range(2), range(6))
    assert (b.kv_heads, b.heads) == (range(2, 3), range(6, 9))
    assert a.vocab == range(24576) and b.vocab == range(24576, 49152)
    local = local_config(SMOLLM2_135M, b)
    assert (local.num_heads, local.num_kv_heads, local.intermediate_size, local.vocab_size) == (3, 1, 768, 24576)


def test_llama2_70b_on_eight_ranks():
    shard = plan_shard(LLAMA2_70B, 8, 7)
    assert (shard.kv_heads, shard.heads, len(shard.ffn)) == (range(7, 8), range(56, 64), 3584)


def test_qkv_rows_of_a_rank_are_its_q_k_and_v_heads():
    shard = plan_shard(SMOLLM2_135M, 2, 1)
    piece = tensor_slice(SMOLLM2_135M, shard, "layers.3.attn.qkv.weight")
    q, kv = SMOLLM2_135M.q_size, SMOLLM2_135M.kv_size
    assert piece.rows == (range(6 * 64, 9 * 64), range(q + 2 * 64, q + 3 * 64), range(q + kv + 2 * 64, q + kv + 3 * 64))
    assert tensor_slice(SMOLLM2_135M, shard, "layers.3.attn.o.weight").cols == range(6 * 64, 9 * 64)
    assert tensor_slice(SMOLLM2_135M, shard, "layers.3.mlp.down.weight").cols == range(768, 1536)
    assert tensor_slice(SMOLLM2_135M, shard, "layers.3.attn_norm.weight").rows is None


def test_gptj_row_parallel_bias_only_on_the_leader_and_vocab_padding():
    shard = plan_shard(TINY_GPTJ, 2, 1)
    assert tensor_slice(TINY_GPTJ, shard, "layers.0.mlp.fc_out.bias").leader_only
    head = tensor_slice(TINY_GPTJ, shard, "lm_head.bias")
    assert head.rows == (range(130, 259),) and head.pad_rows == 1  # 259 = 130 + 129 (+1 zero row)


@pytest.mark.parametrize("size,rank,message", [(4, 0, "does not divide"), (2, 2, "out of range"), (0, 0, "positive")])
def test_refusals(size, rank, message):
    with pytest.raises(ValueError, match=message):
        plan_shard(SMOLLM2_135M, size, rank)

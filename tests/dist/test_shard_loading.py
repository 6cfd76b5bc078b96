"""Sharded loading reads each rank's slices from a tenor checkpoint (safetensors get_slice);
stitched back together they are the whole model's tensors."""

import torch

from tenor.checkpoints.format import save_checkpoint
from tenor.checkpoints.quantize import quantize_weights
from tenor.dist.shard_loading import finish, open_source
from tenor.dist.shard_plan import plan_shard, tensor_slice
from tenor.models.model import random_weights
from tenor.registry import TINY_GPTJ, TINY_LLAMA


def rank_tensors(path, config, world):
    source = open_source(str(path), None, 0)
    out = []
    for rank in range(world):
        shard = plan_shard(config, world, rank)
        out.append(
            {
                n: finish(source.read(n, tensor_slice(config, shard, n)), tensor_slice(config, shard, n), rank)
                for n in source.names
            }
        )
    return out


def test_llama_slices_stitch_back(tmp_path):
    weights = random_weights(TINY_LLAMA, 3)
    save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights)
    a, b = rank_tensors(tmp_path / "ckpt", TINY_LLAMA, 2)
    assert torch.equal(
        torch.cat([a["layers.1.attn.o.weight"], b["layers.1.attn.o.weight"]], 1), weights["layers.1.attn.o.weight"]
    )
    assert torch.equal(torch.cat([a["embed.weight"], b["embed.weight"][:-1]]), weights["embed.weight"])
    assert torch.equal(b["embed.weight"][-1], torch.zeros(TINY_LLAMA.hidden_size))  # vocab padding
    qkv = weights["layers.0.attn.qkv.weight"]
    q, kv = TINY_LLAMA.q_size, TINY_LLAMA.kv_size
    assert torch.equal(b["layers.0.attn.qkv.weight"][: q // 2], qkv[q // 2 : q])
    assert torch.equal(b["layers.0.attn.qkv.weight"][q // 2 + kv // 2 :], qkv[q + kv + kv // 2 :])
    assert torch.equal(a["norm.weight"], weights["norm.weight"])


def test_gptj_and_int8_scales(tmp_path):
    weights = random_weights(TINY_GPTJ, 3)
    save_checkpoint(tmp_path / "ckpt", TINY_GPTJ, quantize_weights(weights, TINY_GPTJ), quantization="int8")
    a, b = rank_tensors(tmp_path / "ckpt", TINY_GPTJ, 2)
    assert a["layers.0.mlp.fc_in.weight"].dtype == torch.int8
    assert a["layers.0.mlp.fc_in.weight_scale"].shape == (TINY_GPTJ.intermediate_size // 2,)
    assert a["layers.0.mlp.fc_out.weight_scale"].shape == (TINY_GPTJ.hidden_size,)  # row-parallel: all out rows
    assert torch.equal(b["layers.0.mlp.fc_out.bias"], torch.zeros(TINY_GPTJ.hidden_size))
    assert torch.equal(a["layers.0.mlp.fc_out.bias"], weights["layers.0.mlp.fc_out.bias"])

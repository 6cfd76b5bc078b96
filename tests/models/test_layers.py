"""Building blocks: the paged KV cache round trip (float and int8, both dtypes), packed
linears against F.linear, and decode attention against a per-sequence reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear, decode_attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("quantized", [False, True])
def test_kv_cache_round_trip(dtype, quantized):
    cache = PagedKVCache(2, 4, 16, 3, 64, dtype, quantized=quantized)
    gen = torch.Generator().manual_seed(0)
    k = (torch.randn(5, 3, 64, generator=gen) * 4).to(dtype)
    v = (torch.randn(5, 3, 64, generator=gen) * 4).to(dtype)
    slots = torch.tensor([0, 1, 2, 17, 40])
    cache.write(1, slots, k, v)
    got_k, got_v = cache.read(1, slots)  # [K, L, E]
    # int8 with one scale per token and head: error below 1% of that head's largest value.
    tolerance = (k.float().abs().amax() / 100) if quantized else 0
    assert (got_k.transpose(0, 1).float() - k.float()).abs().max() <= tolerance
    assert (got_v.transpose(0, 1).float() - v.float()).abs().max() <= tolerance
    assert cache.read(0, slots)[0].abs().max() == 0  # other layers untouched
    # Whole blocks, head-major: rows are (kv head, sequence); slot 17 is block 1, offset 1.
    block_k, _ = cache.read_blocks(1, torch.tensor([[0], [1]]))  # [K * 2, 16, E]
    assert block_k.shape == (3 * 2, 16, 64)
    assert (block_k[1, 1].float() - k[3, 0].float()).abs().max() <= tolerance
    assert (block_k[2 * 2 + 1, 1].float() - k[3, 2].float()).abs().max() <= tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_f_linear(dtype, bias):
    gen = torch.Generator().manual_seed(1)
    weight, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    layer = ParallelLinear(64, 96, bias=bias)
    layer.load(weight, dtype, bias=b if bias else None)
    assert layer.packed_weight is not None and layer.weight.numel() == 0  # the plain copy is dropped
    tolerance = 0 if dtype == torch.bfloat16 else 1e-4  # bf16: the same oneDNN kernel, bit for bit
    for shape in [(1, 64), (7, 64), (2, 5, 64)]:
        x = torch.randn(*shape, generator=gen).to(dtype)
        expected = F.linear(x, weight.to(dtype), b.to(dtype) if bias else None)
        assert (layer(x).float() - expected.float()).abs().max() <= tolerance


def test_int8_linear_is_not_packed():
    layer = ParallelLinear(64, 32, bias=False)
    layer.load(torch.randint(-127, 127, (32, 64)), torch.bfloat16, scale=torch.full((32,), 0.01))
    assert layer.packed_weight is None and layer.weight.dtype == torch.int8
    assert layer(torch.randn(3, 64, dtype=torch.bfloat16)).shape == (3, 32)


def _reference_decode(q, keys, values):
    """Per sequence, per query head: softmax(q k^T / sqrt(E)) v over that sequence's own context."""
    group = q.shape[1] // keys[0].shape[0]
    out = []
    for qi, k, v in zip(q.float(), keys, values):  # k, v: [K, S, E]
        k, v = k.float().repeat_interleave(group, 0), v.float().repeat_interleave(group, 0)
        probs = (qi[:, None, :] @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
        out.append((probs @ v)[:, 0])
    return torch.stack(out)


@pytest.mark.parametrize("lengths", [[5], [16], [21], [21, 21, 21], [3, 40, 17]])
def test_decode_attention_matches_reference(lengths):
    """One stream (SDPA), equal lengths with a partial last block (tail masked in the scores),
    and different lengths (masked)."""
    block, kv_heads, heads, dim = 16, 3, 9, 64
    gen = torch.Generator().manual_seed(2)
    blocks_per = [-(-n // block) for n in lengths]
    cache = PagedKVCache(1, sum(blocks_per) + 2, block, kv_heads, dim, torch.float32)
    tables, keys, values, first = [], [], [], 1  # block 0 stays unused: tables must be honoured
    for n, nb in zip(lengths, blocks_per):
        table = list(range(first, first + nb))[::-1]  # out of order on purpose
        first += nb
        k, v = torch.randn(n, kv_heads, dim, generator=gen), torch.randn(n, kv_heads, dim, generator=gen)
        slots = torch.tensor([table[p // block] * block + p % block for p in range(n)])
        cache.write(0, slots, k, v)
        tables.append(table)
        keys.append(k.transpose(0, 1))
        values.append(v.transpose(0, 1))
    width = max(blocks_per)
    decode_blocks = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    mask = None
    if min(lengths) != max(lengths):
        mask = torch.arange(width * block)[None, :] < torch.tensor(lengths)[:, None]
        mask = mask.repeat(kv_heads, 1)[:, None, :]
    batch = AttentionBatch(torch.tensor([], dtype=torch.long), len(lengths), decode_blocks, mask, [],
                           decode_span=max(lengths))
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    got = decode_attention(q, cache, 0, batch)
    assert (got - _reference_decode(q, keys, values)).abs().max() < 1e-4

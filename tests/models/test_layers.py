"""Building blocks: the paged KV cache round trip (float and int8, both dtypes), packed
linears against F.linear, and decode attention against a per-sequence reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from tenor.hardware import fbgemm_fp16_available
from tenor.models import native
from tenor.models.kernels import (
    Bf16BatchKernel,
    DenseKernel,
    Float32DecodeKernel,
    Fp16DecodeKernel,
    Fp16Kernel,
    Int8BlockKernel,
    Int8WeightOnlyKernel,
    OneDnnKernel,
    bf16_batches_apply,
    int8_gemm_applies,
    onednn_pack,
)
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
def test_float_linear_matches_f_linear(dtype, bias):
    """Whatever kernel the CPU gets (tenor's for float32 decode rows where it builds, oneDNN on
    AVX-512, F.linear elsewhere): F.linear's result, bit for bit in bf16 where it is the same
    oneDNN kernel."""
    gen = torch.Generator().manual_seed(1)
    weight, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    layer = ParallelLinear(64, 96, bias=bias)
    layer.load(weight, dtype, bias=b if bias else None)
    assert isinstance(layer.kernel, (DenseKernel, OneDnnKernel, Float32DecodeKernel))
    if dtype == torch.float32 and native.available():
        assert isinstance(layer.kernel, Float32DecodeKernel)  # decode rows read the weight in place
    tolerance = 0 if dtype == torch.bfloat16 else 1e-4
    for shape in [(1, 64), (7, 64), (9, 64), (2, 5, 64), (40, 64)]:
        x = torch.randn(*shape, generator=gen).to(dtype)
        expected = F.linear(x, weight.to(dtype), b.to(dtype) if bias else None)
        assert (layer(x).float() - expected.float()).abs().max() <= tolerance


def test_onednn_packing_follows_the_cpu():
    packed = onednn_pack(torch.randn(8, 8))
    if (
        torch.backends.cpu.get_cpu_capability() in ("AVX512", "AVX512_BF16", "AMX")
        and torch.backends.mkldnn.is_available()
    ):
        assert packed is not None
    else:
        assert packed is None  # slower than F.linear at batch 1 without AVX-512


@pytest.mark.skipif(not fbgemm_fp16_available(), reason="FBGEMM's fp16 GEMM needs an x86 build of torch")
@pytest.mark.parametrize("bias", [False, True])
def test_fp16_linear_matches_f_linear_on_fp16_weights(bias):
    gen = torch.Generator().manual_seed(2)
    weight, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    layer = ParallelLinear(64, 96, bias=bias)
    layer.load(weight, torch.float32, bias=b if bias else None, weight_format="fp16")
    assert isinstance(layer.kernel, (Fp16Kernel, Fp16DecodeKernel))
    # With tenor's kernel, decode reads its own float16 copy in place (FBGEMM packs another).
    copies = 2 if isinstance(layer.kernel, Fp16DecodeKernel) else 1
    assert isinstance(layer.kernel, Fp16DecodeKernel) == native.available()
    biases = layer.weight_nbytes() - copies * 96 * 64 * 2  # each copy keeps its bias, in its own dtype
    assert 0 <= biases <= (copies * 96 * 4 if bias else 0)
    bf16_batches = isinstance(layer.kernel, Fp16DecodeKernel) and isinstance(layer.kernel.batched, Bf16BatchKernel)
    for shape in [(1, 64), (7, 64), (9, 64), (2, 5, 64), (40, 64)]:  # tenor's kernel up to 8 rows, a GEMM beyond
        x = torch.randn(*shape, generator=gen)
        rows = x.numel() // 64
        if bf16_batches and rows > native.INT8_MAX_ROWS:  # oneDNN in bf16 where the CPU computes it natively
            expected = F.linear(x.bfloat16(), weight.bfloat16(), b.bfloat16() if bias else None).float()
            tolerance = 0.1  # bf16's 8 bits of mantissa on outputs of magnitude ~10
        else:  # the weight rounded to float16, multiplied in float32
            expected, tolerance = F.linear(x, weight.half().float(), b if bias else None), 1e-3
        assert layer(x).shape == expected.shape
        assert (layer(x) - expected).abs().max() <= tolerance


@pytest.mark.skipif(not (fbgemm_fp16_available() and native.available()), reason="needs FBGEMM and a C compiler")
def test_int8_linear_uses_int8_for_few_rows_and_fp16_for_many():
    gen = torch.Generator().manual_seed(4)
    weight = torch.randn(48, 64, generator=gen) * 0.05
    layer = ParallelLinear(64, 48, bias=False)
    layer.load(weight, torch.float32, weight_format="int8")
    assert isinstance(layer.kernel, Int8BlockKernel)
    if int8_gemm_applies(48):  # AVX2-only CPUs: a second 8-bit copy for tenor's integer GEMM
        assert layer.weight_nbytes() == 48 * 64 * 2 + 2 * 48 * 2 * 8  # each copy a step and an offset per 32
    else:
        assert layer.weight_nbytes() == 48 * 64 * 3 + 48 * 2 * 8  # 8-bit + fp16 copies, a scale and a min per 32
    for rows in (1, 5, 9, 40):  # int8 up to 8 rows, FBGEMM fp16 (or the integer GEMM) beyond
        x = torch.randn(rows, 64, generator=gen)
        assert (layer(x) - F.linear(x, weight)).abs().max() <= 0.01  # 8 bits: 1/255 of a block's range
    assert layer(torch.randn(2, 3, 64)).shape == (2, 3, 48)


def test_decode_kernels_hand_big_batches_to_bf16_where_the_cpu_computes_it():
    weight = torch.randn(48, 64) * 0.05
    kernel = Fp16DecodeKernel(weight, None) if native.available() else None
    if kernel is not None:
        assert isinstance(kernel.batched, Bf16BatchKernel) == bf16_batches_apply()
    if not bf16_batches_apply():
        pytest.skip("no native bf16 with oneDNN on this CPU: big batches go to FBGEMM fp16")
    gen = torch.Generator().manual_seed(6)
    weight, bias = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    bf16 = Bf16BatchKernel(weight, bias)
    assert bf16.nbytes() == 96 * 64 * 2 + 96 * 2
    x = torch.randn(3, 40, 64, generator=gen)
    expected = F.linear(x.bfloat16(), weight.bfloat16(), bias.bfloat16()).float()
    out = bf16(x)
    assert out.dtype == torch.float32 and out.shape == (3, 40, 96)
    assert (out - expected).abs().max() <= 0.1
    assert (out - F.linear(x, weight, bias)).abs().max() <= 0.2  # and close to float32


def test_fp16_weights_need_float32_activations():
    layer = ParallelLinear(64, 32, bias=False)
    with pytest.raises(ValueError, match="float32 activations"):
        layer.load(torch.randn(32, 64), torch.bfloat16, weight_format="fp16")
    with pytest.raises(ValueError, match="weight format"):
        layer.load(torch.randn(32, 64), torch.float32, weight_format="int3")


def test_int8_linear_keeps_int8_weights():
    layer = ParallelLinear(64, 32, bias=False)
    weight, scale = torch.randint(-127, 127, (32, 64)), torch.full((32,), 0.01)
    layer.load(weight, torch.bfloat16, scale=scale)
    assert isinstance(layer.kernel, Int8WeightOnlyKernel) and layer.kernel.weight.dtype == torch.int8
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    expected = F.linear(x.float(), weight.float() * 0.01)
    assert (layer(x).float() - expected).abs().max() <= 0.05 * expected.abs().max()


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
    batch = AttentionBatch(
        torch.tensor([], dtype=torch.long), len(lengths), decode_blocks, mask, [], decode_span=max(lengths)
    )
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    got = decode_attention(q, cache, 0, batch)
    assert (got - _reference_decode(q, keys, values)).abs().max() < 1e-4

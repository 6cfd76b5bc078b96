"""tenor's fused float32 CPU kernels against torch's ops, and the build cache that keeps a
binary from ever running on a CPU it was not built for."""

import pytest
import torch
import torch.nn.functional as F

from tenor import hardware
from tenor.models import native

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler, or TENOR_NATIVE_KERNELS=0")


@needs_native
@pytest.mark.parametrize("rows", [1, 7])
def test_rms_norm_matches_torch(rows):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 576, generator=gen) * 3, torch.randn(576, generator=gen)
    assert torch.allclose(native.rms_norm(x, w, 1e-5), F.rms_norm(x, (576,), w, 1e-5), atol=1e-5, rtol=1e-5)


@needs_native
def test_silu_mul_matches_torch():
    gate_up = torch.randn(5, 2 * 96, generator=torch.Generator().manual_seed(1)) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.allclose(native.silu_mul(gate_up), F.silu(gate) * up, atol=1e-5, rtol=1e-5)


@needs_native
@pytest.mark.parametrize("heads, kv_heads", [(9, 3), (4, 4), (8, 1)])
def test_paged_decode_attention_matches_per_sequence_sdpa(heads, kv_heads):
    gen = torch.Generator().manual_seed(2)
    block_size, num_blocks, dim = 16, 40, 64
    k = torch.randn(kv_heads, num_blocks * block_size, dim, generator=gen)
    v = torch.randn(kv_heads, num_blocks * block_size, dim, generator=gen)
    table = torch.randperm(num_blocks, generator=gen)[:4 * 8].view(4, 8)  # scattered blocks
    lengths = torch.tensor([1, 16, 17, 128])  # one token, a full block, one past it, all blocks
    q = torch.randn(4, heads, dim, generator=gen)
    out = native.paged_decode_attention(q, k, v, table, lengths, block_size, 128, native.DecodeScratch())
    for b, length in enumerate(lengths.tolist()):
        slots = (table[b][:, None] * block_size + torch.arange(block_size)).reshape(-1)[:length]
        kb = k[:, slots].repeat_interleave(heads // kv_heads, 0)
        vb = v[:, slots].repeat_interleave(heads // kv_heads, 0)
        expected = F.scaled_dot_product_attention(q[b][:, None], kb, vb)[:, 0]
        assert torch.allclose(out[b], expected, atol=1e-5), f"sequence {b}"


def test_library_is_rebuilt_for_another_cpu(monkeypatch):
    here = native._library_path("gcc")
    other = hardware.CpuInfo("Other", "x86_64", frozenset({"avx512f"}), "AVX512", 2)
    monkeypatch.setattr(hardware, "cpu_info", lambda: other)
    assert native._library_path("gcc") != here  # a binary built elsewhere is never loaded here


def test_build_failure_is_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    with pytest.raises(RuntimeError, match="failed"):
        native.build()


@needs_native
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_u8_block_linear_matches_dequantized_weights(rows):
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(40, 96, generator=gen) * 0.05, torch.randn(40, generator=gen)
    q, scales, mins = native.quantize_u8_blocks(weight)
    assert q.dtype == torch.uint8 and scales.shape == mins.shape == (40, 3)
    dequantized = (q.view(40, 3, 32).float() * scales[..., None] + mins[..., None]).view(40, 96)
    assert (dequantized - weight).abs().max() <= scales.max() / 2 + 1e-6  # half a step at most
    x = torch.randn(rows, 96, generator=gen)
    expected = F.linear(x, dequantized, bias)
    assert torch.allclose(native.u8_block_linear(x, q, scales, mins, bias), expected, atol=1e-5)
    assert torch.allclose(native.u8_block_linear(x, q, scales, mins, None), expected - bias, atol=1e-5)


def test_q4_1_blocks_land_on_the_u8_grid_exactly():
    """A GGUF Q4_1 block is min + d * q4, q4 in 0..15: the 8-bit grid's step is d / 17."""
    gen = torch.Generator().manual_seed(6)
    d, low = torch.rand(8, 2, 1, generator=gen) * 0.01, torch.randn(8, 2, 1, generator=gen) * 0.1
    q4 = torch.randint(0, 16, (8, 2, 32), generator=gen)
    q4[..., 0], q4[..., 1] = 0, 15  # Q4_1 blocks span their own minimum and maximum
    weight = (low + d * q4).reshape(8, 64)
    q, scales, mins = native.quantize_u8_blocks(weight)
    dequantized = (q.view(8, 2, 32).float() * scales[..., None] + mins[..., None]).view(8, 64)
    assert torch.allclose(dequantized, weight, atol=1e-6)


def test_q8_0_blocks_land_on_the_u8_grid_exactly():
    """A GGUF Q8_0 block is d * q, q in -127..127 with some |q| = 127: the symmetric grid."""
    gen = torch.Generator().manual_seed(7)
    d = torch.rand(8, 2, 1, generator=gen) * 0.001
    q8 = torch.randint(-127, 128, (8, 2, 32), generator=gen)
    q8[..., 0] = 127
    weight = (d * q8).reshape(8, 64)
    q, scales, mins = native.quantize_u8_blocks(weight)
    dequantized = (q.view(8, 2, 32).float() * scales[..., None] + mins[..., None]).view(8, 64)
    assert torch.allclose(dequantized, weight, atol=1e-7)


@needs_native
def test_rotary_kv_write_matches_rotary_then_cache_write():
    from tenor.models.layers import PagedKVCache, Rotary

    gen = torch.Generator().manual_seed(5)
    heads, kv_heads, dim, tokens = 6, 2, 16, 5
    rotary = Rotary(dim, 64, 10000.0, None, interleaved=False)
    positions = torch.tensor([0, 3, 7, 8, 40])
    cos, sin = rotary.tables(positions)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    slots = torch.tensor([5, 0, 33, 17, 2])
    expected_cache = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32)
    qk = rotary.apply(qkv[:, : (heads + kv_heads) * dim].view(tokens, -1, dim), cos, sin)
    v = qkv[:, (heads + kv_heads) * dim:].view(tokens, kv_heads, dim)
    expected_cache.write(0, slots, qk[:, heads:], v)
    cache = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32)
    fused = qkv.clone()
    native.rotary_kv_write(fused, cos, sin, cache.kv[0, 0], cache.kv[0, 1], slots, heads, kv_heads)
    assert torch.allclose(fused[:, : (heads + kv_heads) * dim].view(tokens, -1, dim), qk, atol=1e-6)
    assert torch.equal(fused[:, (heads + kv_heads) * dim:], qkv[:, (heads + kv_heads) * dim:])  # v untouched
    assert torch.allclose(cache.kv, expected_cache.kv, atol=1e-6)


@needs_native
def test_paged_decode_attention_over_an_int8_cache_matches_its_dequantized_values():
    from tenor.models.layers import PagedKVCache

    gen = torch.Generator().manual_seed(8)
    heads, kv_heads, dim, block_size = 6, 2, 32, 16
    cache = PagedKVCache(1, 8, block_size, kv_heads, dim, torch.float32, quantized=True)
    slots = torch.randperm(8 * block_size, generator=gen)[:40]
    cache.write(0, slots, torch.randn(40, kv_heads, dim, generator=gen), torch.randn(40, kv_heads, dim, generator=gen))
    k, v = cache.read(0, torch.arange(8 * block_size))  # dequantized [K, S, E]
    table, lengths = torch.tensor([[3, 1, 6], [0, 7, 2]]), torch.tensor([40, 33])
    q = torch.randn(2, heads, dim, generator=gen)
    out = native.paged_decode_attention(q, cache.kv[0, 0], cache.kv[0, 1], table, lengths, block_size, 48,
                                        native.DecodeScratch(), cache.scales[0, 0], cache.scales[0, 1])
    expected = native.paged_decode_attention(q, k.contiguous(), v.contiguous(), table, lengths, block_size, 48,
                                             native.DecodeScratch())
    assert torch.allclose(out, expected, atol=1e-5)

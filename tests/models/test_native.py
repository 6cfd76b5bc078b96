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
def test_int8_block_linear_matches_dequantized_weights(rows):
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(40, 96, generator=gen) * 0.05, torch.randn(40, generator=gen)
    q, scales = native.quantize_int8_blocks(weight)
    assert q.dtype == torch.int8 and scales.shape == (40, 3)
    dequantized = (q.view(40, 3, 32).float() * scales[..., None]).view(40, 96)
    assert (dequantized - weight).abs().max() <= scales.max() / 2 + 1e-7  # half a step at most
    x = torch.randn(rows, 96, generator=gen)
    expected = F.linear(x, dequantized, bias)
    assert torch.allclose(native.int8_block_linear(x, q, scales, bias), expected, atol=1e-5)
    assert torch.allclose(native.int8_block_linear(x, q, scales, None), expected - bias, atol=1e-5)

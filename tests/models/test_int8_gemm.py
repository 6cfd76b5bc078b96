"""The block weights' int8 GEMM (tenor/csrc/int8_gemm.c): against its integer reference and the
float product, 4- and 8-bit levels, its layout, and where tenor chooses it."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tenor import hardware
from tenor.models import kernels, native
from tenor.models.kernels import Int8BlockKernel, Int8GemmKernel, int8_gemm_applies
from tests.models.test_native import q4_1_weight

needs_simd = pytest.mark.skipif(
    not native.int8_gemm_simd(), reason="tenor's kernels not built, or built without AVX2 (int8_gemm's vector path)"
)


def block_levels(weight: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight as (levels, steps, offsets), as Int8BlockKernel hands it over: Q4_1 blocks as levels
    0..15, any other as int8 levels."""
    q, scales, mins = native.quantize_u8_blocks(weight)
    if bits == 4:
        nibbles = native.nibble_blocks(q, scales, mins)
        assert nibbles is not None
        return q // 17, nibbles[1], nibbles[2]
    levels, offsets = native.signed_blocks(q, scales, mins)
    return levels, scales, offsets


def block_weight(bits: int, out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """Q4_1 blocks for 4 bits; for 8, normal weights with a few blocks holding -128 (the grid's end)."""
    if bits == 4:
        return q4_1_weight(out_features, in_features, seed)
    return torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed)) * 0.05


def integer_reference(x, levels, steps, offsets, bias):
    """What the kernel computes: x to int8 per block of 32 (absmax / 127, rounded half to even),
    exact integer dots, each scaled by both steps, plus each offset times x's float block sum."""
    rows, in_features = x.shape
    blocks = x.view(rows, in_features // 32, 32)
    step = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
    xq = torch.round(blocks / step.clamp(min=1e-30))
    w = levels.view(levels.shape[0], in_features // 32, 32).double()
    dots = torch.einsum("rbi,obi->rob", xq.double(), w)
    out = (dots * steps[None].double() * step[:, None, :, 0].double()).sum(-1)
    out += blocks.sum(-1).double() @ offsets.double().T
    return (out if bias is None else out + bias.double()).float()


@needs_simd
@pytest.mark.parametrize("rows", [1, 5, 6, 7, 30, 100])  # whole and partial tiles of 6; 30, 100: several chunks
@pytest.mark.parametrize("bits, with_bias", [(4, False), (4, True), (8, True)])
def test_int8_gemm_matches_its_integer_reference_and_the_float_product(rows, bits, with_bias):
    gen = torch.Generator().manual_seed(rows)
    weight = block_weight(bits, 24, 96, seed=rows)
    bias = torch.randn(24, generator=gen) if with_bias else None
    levels, steps, offsets = block_levels(weight, bits)
    if bits == 8:
        assert levels.min() == -128 or levels.max() == 127
    packed = native.int8_gemm_pack(levels, bits, steps, offsets)
    assert packed.levels.shape == (3, 3, 256) and packed.steps.shape == packed.offsets.shape == (3, 3, 8)
    x = torch.randn(rows, 96, generator=gen)
    x[0, :32] *= 50.0  # one block far larger than the rest: steps are per block, not per row
    got = native.int8_gemm(x, packed, bias)
    expected = integer_reference(x, levels, steps, offsets, bias)
    assert got.shape == (rows, 24)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-4)
    float_product = F.linear(x, weight, bias)  # what int8 activations cost: half a step of x a weight
    assert (got - float_product).abs().max() <= 0.02 * float_product.abs().max()


def test_pack_puts_four_inputs_of_eight_outputs_in_each_step():
    levels = (torch.arange(16 * 64) % 16).to(torch.uint8).view(16, 64)
    levels[9, 37] = 3  # output 9 is tile 1's output 1; input 37 is block 1, step 1, input 1
    steps, offsets = torch.rand(16, 2), torch.rand(16, 2)
    packed = native.int8_gemm_pack(levels, 4, steps, offsets)
    assert packed.levels[1, 1, 32 * 1 + 4 * 1 + 1] == 3 and packed.out_features == 16
    assert packed.steps[1, 1, 1] == steps[9, 1] and packed.offsets[1, 0, 7] == offsets[15, 0]
    signed = native.int8_gemm_pack(levels.to(torch.int8) - 8, 8, steps, offsets)
    assert signed.levels.dtype == torch.uint8 and signed.levels[1, 1, 37] == 256 - 5  # -5 as a byte
    with pytest.raises(ValueError, match="multiple of 8"):
        native.int8_gemm_pack(levels[:12], 4, steps[:12], offsets[:12])
    with pytest.raises(ValueError, match="4- or 8-bit"):
        native.int8_gemm_pack(levels, 2, steps, offsets)


AVX2_ONLY = dataclasses.replace(hardware.cpu_info(), flags=frozenset({"avx2", "fma"}))


@needs_simd
@pytest.mark.parametrize("bits", [4])
def test_block_weights_take_the_int8_gemm_for_big_batches_on_avx2_only_cpus(monkeypatch, bits):
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    weight, bias = block_weight(bits, 48, 64, seed=8), torch.randn(48)
    kernel = Int8BlockKernel(weight, bias)
    assert kernel.bits == bits and isinstance(kernel.batched, Int8GemmKernel)
    decode_levels = 48 * 64 * bits // 8
    assert kernel.nbytes() == decode_levels + 48 * 64 + 4 * (4 * 48 * 2) + 2 * 4 * 48  # levels, steps, biases
    x = torch.randn(2, 20, 64)
    out = kernel(x)
    assert out.shape == (2, 20, 48)
    assert (out - F.linear(x, weight, bias)).abs().max() <= 0.02 * out.abs().max()
    monkeypatch.setattr(hardware, "cpu_info", lambda: dataclasses.replace(AVX2_ONLY, flags=frozenset({"avx512f"})))
    assert not isinstance(Int8BlockKernel(weight, bias).batched, Int8GemmKernel)


def test_the_int8_gemm_is_chosen_only_on_avx2_cpus_without_avx512(monkeypatch):
    monkeypatch.setattr(kernels.native, "int8_gemm_simd", lambda: True)
    for flags, expected in [({"avx2", "fma"}, True), ({"avx2", "avx512f"}, False), ({"asimd"}, False)]:
        cpu = dataclasses.replace(hardware.cpu_info(), flags=frozenset(flags))
        monkeypatch.setattr(hardware, "cpu_info", lambda cpu=cpu: cpu)
        assert int8_gemm_applies(64) is expected, flags
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    assert not int8_gemm_applies(60)  # not whole tiles of 8 outputs

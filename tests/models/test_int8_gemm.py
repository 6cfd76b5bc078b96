"""The block weights' integer GEMM (tenor/csrc/int8_gemm.c), 4-bit levels against int8 x and 8-bit
levels against int16 x: against its integer reference and the float product, its layout, and
where tenor chooses it."""

import ctypes
import dataclasses
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tenor import hardware
from tenor.models import block_weights, kernels, native
from tenor.models.kernels import Int8BlockKernel, Int8GemmKernel, int8_gemm_applies
from tests.models.test_block_weights import fixed_steps_of, nibbles_of, q4_1_weight, q8_0_blocks

needs_simd = pytest.mark.skipif(
    not native.int8_gemm_simd(), reason="tenor's kernels not built, or built without AVX2 (int8_gemm's vector path)"
)


def q4_levels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Q4_1 weight as (levels 0..15, steps, offsets), as Int8BlockKernel hands it over."""
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    nibbles = block_weights.nibble_blocks(q, scales, mins)
    assert nibbles is not None
    return nibbles.levels, nibbles.steps, nibbles.offsets


def q8_levels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Any weight as (int8 levels, steps, offsets), as Int8BlockKernel hands it over."""
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    levels, offsets = block_weights.signed_blocks(q, scales, mins)
    return levels, scales, offsets


def packed_steps(packed: block_weights.Int8GemmWeights, steps: torch.Tensor) -> torch.Tensor:
    """The steps [OUT, IN / 32] a pack multiplies by: `steps` themselves, or fixed steps' values."""
    return fixed_steps_of(packed)[2] if packed.fixed_steps else steps


def integer_reference(x, levels, steps, offsets, bias):
    """What the kernel computes: x to int8 (4-bit levels) or int16 (8-bit) per block of 32 (absmax /
    127 or 32767, rounded half to even), exact integer dots, each scaled by both steps, plus each
    offset times x's block sum: of the quantized block for int8 x (so that the product is exactly
    the weight times quantized x), the float one for int16 x."""
    rows, in_features = x.shape
    blocks = x.view(rows, in_features // 32, 32)
    int16_x = levels.dtype == torch.int8
    step = blocks.abs().amax(dim=-1, keepdim=True) / (32767.0 if int16_x else 127.0)
    xq = torch.round(blocks / step.clamp(min=1e-30))
    w = levels.view(levels.shape[0], in_features // 32, 32).double()
    dots = torch.einsum("rbi,obi->rob", xq.double(), w)
    out = (dots * steps[None].double() * step[:, None, :, 0].double()).sum(-1)
    sums = blocks.sum(-1).double() if int16_x else xq.double().sum(-1) * step[..., 0].double()
    out += sums @ offsets.double().T
    return (out if bias is None else out + bias.double()).float()


@needs_simd
# whole and partial tiles of 6 (12 rows with AVX-512); 100: several chunks of 48
@pytest.mark.parametrize("rows", [1, 5, 6, 7, 11, 12, 13, 30, 100])
@pytest.mark.parametrize("bits, with_bias", [(4, False), (4, True), (8, True)])
def test_int8_gemm_matches_its_integer_reference_and_the_float_product(rows, bits, with_bias):
    gen = torch.Generator().manual_seed(rows)
    weight = q4_1_weight(24, 96, seed=rows) if bits == 4 else torch.randn(24, 96, generator=gen) * 0.05
    bias = torch.randn(24, generator=gen) if with_bias else None
    levels, steps, offsets = q4_levels(weight) if bits == 4 else q8_levels(weight)
    packed = block_weights.int8_gemm_pack(levels, steps, offsets, native.int8_gemm_fixed_steps())
    assert packed.bits == bits and packed.levels.shape == (3, 3, 128 if bits == 4 else 256)
    assert packed.offsets.shape == (3, 3, 8)
    assert packed.fixed_steps or packed.steps.shape == (3, 3, 8)
    x = torch.randn(rows, 96, generator=gen)
    x[0, :32] *= 50.0  # one block far larger than the rest: steps are per block, not per row
    got = native.int8_gemm(x, packed, bias)
    expected = integer_reference(x, levels, packed_steps(packed, steps), offsets, bias)
    assert got.shape == (rows, 24)
    if bits == 4:
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-4)
        # exactly the weight times quantized x: the offsets meet x's quantized block sums
        blocks = x.view(rows, 3, 32)
        step = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
        x_quantized = (torch.round(blocks / step) * step).view(rows, 96)
        as_packed = block_weights.block_values(levels, packed_steps(packed, steps), offsets)
        assert torch.allclose(got, F.linear(x_quantized, as_packed, bias), atol=1e-4)
    else:  # int16 x's dots reach 2^27, past float32's 24-bit mantissa: float32 rounding of the largest
        assert (got - expected).abs().max() <= 3e-5 * expected.abs().max()
    float_product = F.linear(x, weight, bias)  # what quantizing x costs: half a step of x a weight
    tolerance = 0.02 if bits == 4 else 0.01  # int16 x: the 8-bit weights' own rounding dominates
    assert (got - float_product).abs().max() <= tolerance * float_product.abs().max()


AVX2_ONLY = dataclasses.replace(hardware.cpu_info(), flags=frozenset({"avx2", "fma"}))


@needs_simd
@pytest.mark.parametrize("int8_activations", [False, True])
def test_block_weights_take_the_integer_gemm_for_big_batches_on_avx2_only_cpus(monkeypatch, int8_activations):
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    weight, bias = q4_1_weight(48, 64, seed=8), torch.randn(48)
    kernel = Int8BlockKernel(weight, bias, int8_activations=int8_activations)
    assert kernel.bits == 4 and isinstance(kernel.batched, Int8GemmKernel)
    # int8 x against the 4-bit levels only when asked (--quantize int8a8); by default int16 x
    # against them shifted to int8 levels, as exact as float weights
    assert kernel.batched.weights.bits == (4 if int8_activations else 8)
    units = 4 * 48 if kernel.batched.weights.fixed_steps else 0  # each output's unit, after fixed steps
    gemm_levels = 48 * 64 // 2 if int8_activations else 48 * 64  # 4-bit levels two a byte, 8-bit ones a byte
    # decode's nibbles, the GEMM's levels, steps and offsets, biases
    assert kernel.nbytes() == 48 * 64 // 2 + gemm_levels + 4 * (4 * 48 * 2) + 2 * 4 * 48 + units
    x = torch.randn(2, 20, 64)
    out = kernel(x)
    assert out.shape == (2, 20, 48)
    error = (out - F.linear(x, weight, bias)).abs().max() / out.abs().max()
    assert error <= (0.02 if int8_activations else 1e-4)
    eight_bit = Int8BlockKernel(torch.randn(48, 64) * 0.05, None, int8_activations=int8_activations)
    assert eight_bit.bits == 8 and eight_bit.batched.weights.bits == 8  # int16 x for 8-bit weights always


@needs_simd
def test_a_decode_steps_rows_take_the_integer_gemm_from_two_and_a_short_prompts_the_decode_kernel(monkeypatch):
    """The decode kernel's int16 multiply-adds bind it past one row, so a decode step's rows take
    the integer GEMM from GEMM_MIN_ROWS on (int8 x against 4-bit levels under int8a8); one row, and
    up to 8 rows of a prompt, keep the decode kernel and its int16 x. Which kernel ran shows in the
    numbers: they differ by x's rounding."""
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    weight = q4_1_weight(48, 64, seed=10)
    kernel = Int8BlockKernel(weight, None, int8_activations=True)
    assert isinstance(kernel.batched, Int8GemmKernel) and native.GEMM_MIN_ROWS == 2
    x = torch.randn(9, 64)
    decoded = native.block_linear(x[:8], kernel.q, kernel.bits, kernel.scales, kernel.offsets, None)
    gemm = native.int8_gemm(x, kernel.batched.weights, None)
    assert not torch.equal(decoded, gemm[:8])
    assert torch.equal(kernel.decoding(x[:1]), decoded[:1])
    for rows in (2, 3, 8):
        assert torch.equal(kernel.decoding(x[:rows]), gemm[:rows])
        assert torch.equal(kernel(x[:rows]), decoded[:rows])  # a prompt's rows
    assert torch.equal(kernel(x), gemm) and torch.equal(kernel.decoding(x), gemm)
    dense = kernels.DenseKernel(weight, None)  # no faster form: decoding is the plain call
    assert torch.equal(dense.decoding(x), dense(x))


ZEN5_FLAGS = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}


@pytest.mark.parametrize(
    "flags, width, for_int8, for_int8a8",
    [
        ({"avx2", "fma"}, 256, True, True),  # AVX2 only: the integer GEMM against FBGEMM's 256-bit fp16
        ({"avx2", "avx_vnni"}, 256, True, True),
        ({"avx2", "avx512f"}, 256, False, False),  # AVX-512 without VNNI: FBGEMM's 512-bit FMAs are ahead
        ({"avx2", "avx512f", "avx512_vnni"}, 512, True, True),  # Cascade Lake, Ice Lake
        # Zen 4/5: oneDNN's bf16 beats int16 x against 4-bit levels; VNNI's int8 x beats bf16
        (ZEN5_FLAGS, 512, False, True),
        (ZEN5_FLAGS, 256, False, False),  # without the 512-bit VNNI build, bf16 everywhere
        ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"}, 512, False, False),  # AMX's tiles
        ({"avx2", "fma"}, 0, False, False),  # a build without the vector path
        ({"asimd"}, 0, False, False),
    ],
)
def test_the_int8_gemm_is_chosen_where_it_beats_the_float_gemms(monkeypatch, flags, width, for_int8, for_int8a8):
    monkeypatch.setattr(kernels.native, "int8_gemm_width", lambda: width)
    cpu = dataclasses.replace(hardware.cpu_info(), flags=frozenset(flags))
    monkeypatch.setattr(hardware, "cpu_info", lambda: cpu)
    assert int8_gemm_applies(64) is for_int8
    assert int8_gemm_applies(64, int8_activations=True) is for_int8a8
    assert not int8_gemm_applies(60, int8_activations=True)  # not whole tiles of 8 outputs


@needs_simd
def test_int8a8_takes_the_integer_gemm_on_bf16_cpus_without_amx_and_int8_keeps_the_float_gemm(monkeypatch):
    monkeypatch.setattr(kernels.native, "int8_gemm_width", lambda: 512)
    cpu = dataclasses.replace(hardware.cpu_info(), flags=frozenset(ZEN5_FLAGS))
    monkeypatch.setattr(hardware, "cpu_info", lambda: cpu)
    four_bit, eight_bit = q4_1_weight(48, 64, seed=9), torch.randn(48, 64) * 0.05
    assert not isinstance(Int8BlockKernel(four_bit, None).batched, Int8GemmKernel)
    fast = Int8BlockKernel(four_bit, None, int8_activations=True)
    assert isinstance(fast.batched, Int8GemmKernel) and fast.batched.weights.bits == 4  # int8 x
    head = Int8BlockKernel(eight_bit, None, int8_activations=True)
    assert isinstance(head.batched, Int8GemmKernel) and head.batched.weights.bits == 8  # int16 x, the LM head's
    x = torch.randn(20, 64)
    for kernel, weight, tolerance in ((fast, four_bit, 0.02), (head, eight_bit, 0.01)):
        error = (kernel(x) - F.linear(x, weight)).abs().max() / F.linear(x, weight).abs().max()
        assert error <= tolerance


# Each vector path the build can take, with the flags gcc needs for it and the cpuinfo flags the host
# needs to run it: AVX2 alone (vpmaddubsw, vpmaddwd), AVX2 with AVX-VNNI, AVX-512 with VNNI (two
# tiles a register, 12-row tiles), and the portable C.
BUILDS = [
    ("portable", ["-march=x86-64"], set()),
    ("avx2", ["-march=haswell"], {"avx2", "fma", "f16c"}),
    ("avx-vnni", ["-march=haswell", "-mavxvnni"], {"avx2", "fma", "avx_vnni"}),
    ("avx512-vnni", ["-march=cascadelake"], {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}),
]


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() != "x86_64", reason="needs gcc on x86-64")
@pytest.mark.parametrize("name, march, needs", BUILDS, ids=[b[0] for b in BUILDS])
def test_every_build_of_the_int8_gemm_matches_the_integer_reference(tmp_path, name, march, needs):
    missing = needs - hardware.cpu_info().flags
    if missing:
        pytest.skip(f"this CPU cannot run the {name} build (no {', '.join(sorted(missing))})")
    library = tmp_path / f"int8_gemm_{name}.so"
    source = Path(native.__file__).parent.parent / "csrc" / "int8_gemm.c"
    flags = [f for f in native.FLAGS if f != "-march=native"] + march  # tenor's own build, for that CPU
    subprocess.run(["gcc", *flags, "-o", str(library), str(source), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    lib.tenor_int8_gemm_f32.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 5
    lib.tenor_int8_gemm_f32.argtypes += [ctypes.c_int64] * 4
    lib.tenor_int8_gemm_simd.restype = lib.tenor_int8_gemm_fixed_steps.restype = ctypes.c_int64
    assert lib.tenor_int8_gemm_simd() == {"portable": 0, "avx512-vnni": 512}.get(name, 256)
    fixed_steps = bool(lib.tenor_int8_gemm_fixed_steps())
    assert fixed_steps is (name == "avx2")  # vpmaddwd widens int16 sums only without VNNI
    gen = torch.Generator().manual_seed(3)
    for bits in (4, 8):
        weight = q4_1_weight(40, 64, seed=3) if bits == 4 else torch.randn(40, 64, generator=gen) * 0.05
        levels, steps, offsets = q4_levels(weight) if bits == 4 else q8_levels(weight)
        packed = block_weights.int8_gemm_pack(levels, steps, offsets, fixed_steps)  # 5 tiles: two pairs, one alone
        bias = torch.randn(40, generator=gen)
        for rows in (3, 13, 60):
            x = torch.randn(rows, 64, generator=gen)
            out = torch.empty(rows, 40)
            scratch = torch.empty(rows * 64 * 2 + 8 * rows * 2, dtype=torch.uint8)
            lib.tenor_int8_gemm_f32(
                x.data_ptr(), packed.levels.data_ptr(), bits, packed.steps.data_ptr(), packed.offsets.data_ptr(),
                bias.data_ptr(), out.data_ptr(), scratch.data_ptr(), rows, 64, 40, 2,
            )  # fmt: skip
            expected = integer_reference(x, levels, packed_steps(packed, steps), offsets, bias)
            assert (out - expected).abs().max() <= 3e-5 * expected.abs().max(), (bits, rows)
            # fixed steps cost a fraction of the 4-bit levels' own rounding
            float_steps = integer_reference(x, levels, steps, offsets, bias)
            assert (out - float_steps).abs().max() <= 1e-3 * float_steps.abs().max(), (bits, rows)


@needs_simd
@pytest.mark.parametrize("int8_activations", [False, True])
def test_a_gguf_weights_blocks_serve_as_its_floats_do(monkeypatch, int8_activations):
    """Int8BlockKernel from a Q4_1 weight's blocks as read (load_gguf(keep_blocks=True)) and
    from their floats: the same levels; steps re-derived from the floats may differ in their last
    bits (from the default model's own blocks they come out exact: tests/checkpoints/test_gguf.py)."""
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    weight, bias = q4_1_weight(48, 64, seed=9), torch.randn(48)
    blocks = nibbles_of(weight)
    from_blocks = Int8BlockKernel(blocks, bias, int8_activations=int8_activations)
    from_floats = Int8BlockKernel(blocks.dequantize(), bias, int8_activations=int8_activations)
    assert from_blocks.bits == from_floats.bits == 4
    assert isinstance(from_blocks.batched, Int8GemmKernel)
    assert torch.equal(from_blocks.q, from_floats.q)  # the packed levels
    assert torch.allclose(from_blocks.scales, from_floats.scales, rtol=1e-6, atol=0)
    for rows in (1, 20):  # the decode kernel and the integer GEMM
        x = torch.randn(rows, 64)
        assert torch.allclose(from_blocks(x), from_floats(x), rtol=1e-5, atol=1e-5)


@needs_simd
@pytest.mark.parametrize("int8_activations", [False, True])
@pytest.mark.parametrize("offset_steps", [0.0, 16.0])  # Q8_0's blocks; Q5_1's (levels 0..31, a minimum)
def test_byte_blocks_serve_as_they_are(monkeypatch, int8_activations, offset_steps):
    """Int8BlockKernel from 8-bit blocks as read (the default model's tied LM head, Q5_* and Q8_0
    linears): their own levels, steps and offsets, 8-bit against int16 x in big batches whatever
    the activations' setting; its products are the dequantized weight's to float32's rounding."""
    monkeypatch.setattr(hardware, "cpu_info", lambda: AVX2_ONLY)
    q8_0 = q8_0_blocks(48, 64, seed=11)
    blocks = block_weights.ByteBlocks(q8_0.levels, q8_0.steps, offset_steps * q8_0.steps)
    kernel = Int8BlockKernel(blocks, None, int8_activations=int8_activations)
    assert kernel.bits == 8 and torch.equal(kernel.q, blocks.levels) and torch.equal(kernel.scales, blocks.steps)
    assert torch.equal(kernel.offsets, blocks.offsets)
    assert isinstance(kernel.batched, Int8GemmKernel) and kernel.batched.weights.bits == 8
    floats = blocks.dequantize()
    for rows in (1, 20):  # the decode kernel and the integer GEMM
        x = torch.randn(rows, 64)
        expected = F.linear(x, floats)
        assert (kernel(x) - expected).abs().max() <= 2e-4 * expected.abs().max(), rows
    dense = kernels.make_kernel(blocks, torch.float32, "dense")
    x = torch.randn(3, 64)
    assert torch.allclose(dense(x), F.linear(x, floats), rtol=1e-5, atol=1e-5)


def test_blocks_go_to_other_kernels_as_floats():
    weight = q4_1_weight(48, 64, seed=10)
    blocks = nibbles_of(weight)
    dense = kernels.make_kernel(blocks, torch.float32, "dense")
    x = torch.randn(3, 64)
    assert not isinstance(dense, Int8BlockKernel)
    assert torch.allclose(dense(x), F.linear(x, blocks.dequantize()), rtol=1e-5, atol=1e-5)

"""tenor's fused float32 CPU kernels against torch's ops, and the build cache that keeps a
binary from ever running on a CPU it was not built for."""

import ctypes
import dataclasses
import platform
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

from tenor import hardware
from tenor.models import block_weights, native
from tests.models.test_block_weights import q4_1_weight

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler, or TENOR_NATIVE_KERNELS=0")


@needs_native
@pytest.mark.parametrize("rows", [1, 7, 300])  # 300 rows: split over threads
def test_rms_norm_matches_torch(rows):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 576, generator=gen) * 3, torch.randn(576, generator=gen)
    assert torch.allclose(native.rms_norm(x, w, 1e-5), F.rms_norm(x, (576,), w, 1e-5), atol=1e-5, rtol=1e-5)


@needs_native
@pytest.mark.parametrize("rows", [5, 700])  # 700 rows: split over threads
def test_silu_mul_matches_torch(rows):
    gate_up = torch.randn(rows, 2 * 96, generator=torch.Generator().manual_seed(1)) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.allclose(native.silu_mul(gate_up), F.silu(gate) * up, atol=1e-5, rtol=1e-5)


@needs_native
def test_silu_mul_is_exact_enough_at_the_ends_of_float32():
    """The kernel's own exp clamps its input: huge negative gates give 0, huge positive ones the
    gate itself, never nan or inf."""
    gate = torch.tensor([-1e30, -200.0, -88.0, -20.0, -1e-6, 0.0, 1e-6, 20.0, 88.0, 200.0, 1e30])
    gate_up = torch.cat([gate, torch.ones_like(gate)])[None]
    assert torch.allclose(native.silu_mul(gate_up)[0], F.silu(gate), rtol=1e-6, atol=1e-30)


@needs_native
@pytest.mark.parametrize("rows", [5, 700])
def test_silu_mul_in_bf16_is_the_float32_kernel_between_two_conversions(rows):
    gate_up = torch.randn(rows, 2 * 96, generator=torch.Generator().manual_seed(2)) * 4
    gate_up[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e38])
    gate_up = gate_up.bfloat16()
    out = native.silu_mul(gate_up)
    assert out.dtype == torch.bfloat16
    expected = native.silu_mul(gate_up.float()).bfloat16()
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)  # bit for bit


@needs_native
@pytest.mark.parametrize("rows", [3, 40])  # 40 x 4099: split over threads
def test_argmax_logsumexp_matches_torch(rows):
    logits = torch.randn(rows, 4099, generator=torch.Generator().manual_seed(3)) * 6
    logits[1, 10] = logits[1, 4000] = 99.0  # a tie: the first, as torch.argmax picks
    logits[2, :] = -float("inf")
    logits[2, 17] = 0.0  # a row with one finite logit
    best, lse = native.argmax_logsumexp(logits)
    assert torch.equal(best, logits.argmax(dim=-1))
    torch.testing.assert_close(lse, torch.logsumexp(logits, dim=-1), rtol=1e-6, atol=1e-5)
    logits[0, 5], logits[1, 6] = float("nan"), float("inf")
    assert native.argmax_logsumexp(logits)[1][:2].isnan().all()  # the caller's cue for torch's ops


def assert_each_sequence_matches_sdpa(out, q, k, v, table, lengths, block_size):
    """out[b] against SDPA over sequence b's first lengths[b] cached tokens (k, v [K, slots, E])."""
    group = q.shape[1] // k.shape[0]
    for b, length in enumerate(lengths.tolist()):
        slots = (table[b][:, None] * block_size + torch.arange(block_size)).reshape(-1)[:length]
        kb, vb = (t[:, slots].repeat_interleave(group, 0) for t in (k, v))
        expected = F.scaled_dot_product_attention(q[b][:, None], kb, vb)[:, 0]
        assert torch.allclose(out[b], expected, atol=1e-5), f"sequence {b}"


@needs_native
@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (4, 4, 64), (8, 1, 64), (4, 2, 128), (3, 1, 80)])
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_paged_attention_matches_per_sequence_sdpa(heads, kv_heads, dim, kv_dtype):
    """Head dims 64 and 128 run unrolled copies of the kernel, others (80) the generic loop; a
    bf16 cache is read as the float32 values it holds."""
    gen = torch.Generator().manual_seed(2)
    block_size, num_blocks = 16, 40
    stored = [torch.randn(kv_heads, num_blocks * block_size, dim, generator=gen).to(kv_dtype) for _ in "kv"]
    k, v = (t.float() for t in stored)
    table = torch.randperm(num_blocks, generator=gen)[: 4 * 8].view(4, 8)  # scattered blocks
    lengths = torch.tensor([1, 16, 17, 128])  # one token, a full block, one past it, all blocks
    q = torch.randn(4, heads, dim, generator=gen)
    out = native.paged_attention(q, *stored, table, lengths, block_size, 128, native.AttentionScratch())
    assert_each_sequence_matches_sdpa(out, q, k, v, table, lengths, block_size)


@pytest.fixture(scope="module")
def avx2_attention(tmp_path_factory) -> ctypes.CDLL:
    """attention.c built for Haswell whatever this CPU is (once: it takes a while), where it can run."""
    if shutil.which("gcc") is None or platform.machine() != "x86_64":
        pytest.skip("needs gcc on x86-64")
    missing = {"avx2", "fma", "f16c"} - hardware.cpu_info().flags
    if missing:
        pytest.skip(f"this CPU cannot run an AVX2 build (no {', '.join(sorted(missing))})")
    library = tmp_path_factory.mktemp("avx2") / "attention_avx2.so"
    flags = [f for f in native.FLAGS if f not in ("-march=native", "-mprefer-vector-width=512")] + ["-march=haswell"]
    subprocess.run(["gcc", *flags, "-o", str(library), str(native.CSRC / "attention.c"), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    lib.tenor_paged_attention.argtypes = native.PAGED_ATTENTION_ARGTYPES
    lib.tenor_paged_attention.restype = None
    return lib


@pytest.mark.parametrize("kv", ["bfloat16", "int8"])
@pytest.mark.parametrize("heads, kv_heads", [(9, 3), (4, 4), (8, 2), (10, 2), (14, 2), (8, 1)])
def test_avx2_decode_attention_matches_sdpa(monkeypatch, avx2_attention, heads, kv_heads, kv):
    """AVX2 (and AVX-512) builds read a bf16 or int8 cache for decode rows of head dim 64 their own way
    (decode_rows.h: heads three at a time, then the one or two left; a maximum kept as the scores
    are stored; int8 rows' steps applied to the scores and to the weights of V's rows)."""
    from tenor.models.layers import PagedKVCache

    monkeypatch.setattr(native, "_built", lambda: avx2_attention)
    gen = torch.Generator().manual_seed(6)
    dim, block_size, num_blocks = 64, 16, 48
    values = [torch.randn(kv_heads, num_blocks * block_size, dim, generator=gen) for _ in "kv"]
    scales: tuple[torch.Tensor, ...] = ()
    if kv == "int8":
        cache = PagedKVCache(1, num_blocks, block_size, kv_heads, dim, torch.float32, quantized=True)
        slots = torch.arange(num_blocks * block_size)
        cache.write(0, slots, *(t.transpose(0, 1) * (1 + torch.rand(len(slots), 1, 1, generator=gen)) for t in values))
        stored, scales = (cache.kv[0, 0], cache.kv[0, 1]), tuple(cache.scales[0])
        k, v = (t.contiguous() for t in cache.read(0, slots))
    else:
        stored = tuple(t.bfloat16() for t in values)
        k, v = (t.float() for t in stored)
    table = torch.randperm(num_blocks, generator=gen)[: 6 * 8].view(6, 8)  # scattered blocks
    lengths = torch.tensor([1, 15, 16, 17, 33, 128])  # partial halves and chunks, one block, all blocks
    q = torch.randn(6, heads, dim, generator=gen) * 4  # scores far apart: the maximum matters
    out = native.paged_attention(q, *stored, table, lengths, block_size, 128, native.AttentionScratch(), *scales)
    assert_each_sequence_matches_sdpa(out, q, k, v, table, lengths, block_size)


@needs_native
def test_attention_over_a_sink_token_matches_sdpa_and_leaves_subnormals_to_the_caller():
    """A sink key scoring far above the rest makes the others' weights subnormal times small V
    values: the kernel flushes them (x86 would take a slow assist on each) on its own threads only."""
    gen = torch.Generator().manual_seed(5)
    heads, kv_heads, dim, block_size = 4, 2, 64, 16
    k = torch.randn(kv_heads, 4 * block_size, dim, generator=gen) * 0.5
    v = torch.randn(kv_heads, 4 * block_size, dim, generator=gen) * 1e-3
    k[:, 0] *= 400  # scores some hundreds above the other tokens'
    q = torch.randn(1, heads, dim, generator=gen) * 3
    table, lengths = torch.tensor([[0, 1, 2, 3]]), torch.tensor([60])
    out = native.paged_attention(q, k, v, table, lengths, block_size, 60, native.AttentionScratch())
    kb, vb = (t[:, :60].repeat_interleave(heads // kv_heads, 0) for t in (k, v))
    expected = F.scaled_dot_product_attention(q[0][:, None], kb, vb)[:, 0]
    assert torch.allclose(out[0], expected, atol=1e-6)
    assert (torch.tensor([1e-40]) * 1.0).item() != 0.0  # the caller's thread still keeps subnormals


@needs_native
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_prompt_rows_attend_the_same_in_tiles_as_one_by_one(monkeypatch, kv_dtype):
    """A prompt's rows (the same blocks, one token further each) go through the kernel in tiles;
    each row's output is what it is alone, beside rows of other sequences (to rounding: a float32
    chunk read in place sums its dots in another order than a partial one padded in a buffer)."""
    gen = torch.Generator().manual_seed(4)
    heads, kv_heads, dim, block = 9, 3, 64, 16
    k = torch.randn(kv_heads, 12 * block, dim, generator=gen).to(kv_dtype)
    v = torch.randn(kv_heads, 12 * block, dim, generator=gen).to(kv_dtype)
    prompt, other = torch.tensor([7, 2, 9, 4, 0]), torch.tensor([3, 5, 1, 8, 6])
    # 37 rows of one prompt, a decode row of another sequence, then 21 more rows of the first
    table = torch.stack([prompt] * 37 + [other] + [prompt] * 21)
    lengths = torch.cat([torch.arange(3, 40), torch.tensor([50]), torch.arange(40, 61)])
    q = torch.randn(len(lengths), heads, dim, generator=gen)

    def attend(tile: int) -> torch.Tensor:
        monkeypatch.setattr(native, "ATTENTION_TILE", tile)
        return native.paged_attention(q, k, v, table, lengths, block, 61, native.AttentionScratch())

    torch.testing.assert_close(attend(native.ATTENTION_TILE), attend(1), rtol=1e-6, atol=1e-6)


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
def test_block_linear_refuses_rows_past_its_accumulators():
    """Its sums live on the kernel's stack, one per row: more rows than that would write past them.
    No rows (a step with no logits to compute) give no rows."""
    q = torch.zeros(8, 32, dtype=torch.int8)
    steps, offsets = torch.ones(8, 1), torch.zeros(8, 1)
    rows = native.INT8_MAX_ROWS + 1
    with pytest.raises(ValueError, match=f"up to {native.INT8_MAX_ROWS} rows, got {rows}"):
        native.block_linear(torch.zeros(rows, 32), q, 8, steps, offsets, None)
    assert native.block_linear(torch.zeros(0, 32), q, 8, steps, offsets, None).shape == (0, 8)


def quantized_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's own quantization of x [R, IN]: int16 per block of 32, step absmax / 32767."""
    blocks = x.view(x.shape[0], -1, 32)
    step = blocks.abs().amax(dim=-1, keepdim=True) / 32767.0
    return torch.round(blocks / step.clamp(min=1e-30)), step


@needs_native
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("bits", [8, 4])
def test_block_linear_matches_its_integer_reference_and_the_float_product(rows, bits):
    gen = torch.Generator().manual_seed(3)
    if bits == 8:
        weight = torch.randn(40, 96, generator=gen) * 0.05
    else:
        weight = q4_1_weight(40, 96, seed=4)
    bias = torch.randn(40, generator=gen)
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    assert q.dtype == torch.uint8 and scales.shape == mins.shape == (40, 3)
    dequantized = (q.view(40, 3, 32).float() * scales[..., None] + mins[..., None]).view(40, 96)
    assert (dequantized - weight).abs().max() <= scales.max() / 2 + 1e-6  # half a step at most
    if bits == 8:
        packed, offsets = block_weights.signed_blocks(q, scales, mins)
        assert packed.dtype == torch.int8
        levels, step_w = packed.view(40, 3, 32).float(), scales
    else:
        nibbles = block_weights.nibble_blocks(q, scales, mins)
        assert nibbles is not None
        packed, step_w, offsets = nibbles.packed, nibbles.steps, nibbles.offsets
        assert packed.shape == (40, 48)
        blocks = packed.view(40, 3, 16)  # byte i: w[i] low, w[i + 16] high
        levels = torch.cat([blocks & 15, blocks >> 4], dim=-1).float()
    assert torch.allclose((levels * step_w[..., None] + offsets[..., None]).view(40, 96), dequantized, atol=1e-6)
    x = torch.randn(rows, 96, generator=gen)
    xq, step = quantized_activations(x)  # [R, 3, 32], [R, 3, 1]
    dots = torch.einsum("rbi,obi->rob", xq.double(), levels.double())  # exact integers
    expected = (dots.float() * step_w[None] * step[:, None, :, 0]).sum(-1) + (x.view(rows, 3, 32).sum(-1) @ offsets.T)
    got = native.block_linear(x, packed, bits, step_w, offsets, bias)
    assert torch.allclose(got, expected + bias, atol=1e-4)
    assert torch.allclose(native.block_linear(x, packed, bits, step_w, offsets, None), expected, atol=1e-4)
    float_product = F.linear(x, dequantized, bias)  # what activation quantization costs
    assert torch.allclose(got, float_product, atol=1e-4)


@needs_native
def test_values_go_to_a_bf16_cache_rounded_as_torch_rounds_them():
    """V is written unrotated: every value, ties, the largest floats, inf and nan included, lands
    as torch's own float32 -> bf16 conversion."""
    from tenor.models.layers import PagedKVCache

    heads, kv_heads, dim = 2, 1, 16
    special = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 3.3895e38, -3.4e38, float("inf"), 0.0, -0.0])
    v = torch.cat([special, torch.randn(dim * 4 - len(special), generator=torch.Generator().manual_seed(9))])
    qkv = torch.cat([torch.zeros(4, (heads + kv_heads) * dim), v.view(4, dim)], dim=1)
    qkv[0, -1] = float("nan")
    cos, sin = torch.ones(4, dim), torch.zeros(4, dim)
    cache = PagedKVCache(1, 1, 16, kv_heads, dim, torch.float32, kv_dtype=torch.bfloat16)
    native.rotary_kv_write(qkv, cos, sin, cache.kv[0, 0], cache.kv[0, 1], torch.tensor([3, 0, 9, 15]), heads, kv_heads)
    written = cache.kv[0, 1, 0, [3, 0, 9, 15]]
    expected = qkv[:, -dim:].to(torch.bfloat16)
    assert torch.isnan(written[0, -1]) and torch.isnan(expected[0, -1])
    written[0, -1] = expected[0, -1] = 0
    assert torch.equal(written.view(torch.int16), expected.view(torch.int16))


@needs_native
def test_values_go_to_an_int8_cache_as_the_cache_quantizes_them():
    """V is written unrotated: the kernel's int8 levels and steps are PagedKVCache.write's, bit for
    bit, rows of zeros and a row whose largest value is negative included."""
    from tenor.models.layers import PagedKVCache

    heads, kv_heads, dim, tokens = 3, 2, 64, 6
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=torch.Generator().manual_seed(4)) * 3
    v = qkv[:, (heads + kv_heads) * dim :].view(tokens, kv_heads, dim)
    v[1, 0] = 0.0
    v[2, 1] = -v[2, 1].abs()
    cos, sin = torch.ones(tokens, dim), torch.zeros(tokens, dim)
    slots = torch.tensor([3, 0, 9, 15, 40, 22])
    expected = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32, quantized=True)
    expected.write(0, slots, torch.zeros(tokens, kv_heads, dim), v)
    cache = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32, quantized=True)
    native.rotary_kv_write(qkv, cos, sin, cache.kv[0, 0], cache.kv[0, 1], slots, heads, kv_heads, *cache.scales[0])
    assert cache.scales is not None and expected.scales is not None
    assert torch.equal(cache.kv[0, 1], expected.kv[0, 1])
    assert torch.equal(cache.scales[0, 1], expected.scales[0, 1])


@needs_native
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16, torch.int8])
def test_rotary_kv_write_matches_rotary_then_cache_write(kv_dtype):
    """A bf16 cache gets each value rounded as torch rounds it (to nearest even), bit for bit; an
    int8 one the levels and steps of PagedKVCache.write, but for rotated values that differ in
    float32's last bit and so may round to the next level."""
    from tenor.models.layers import PagedKVCache, Rotary

    gen = torch.Generator().manual_seed(5)
    heads, kv_heads, dim, tokens = 6, 2, 16, 5
    rotary = Rotary(dim, 64, 10000.0, None, interleaved=False)
    positions = torch.tensor([0, 3, 7, 8, 40])
    cos, sin = rotary.tables(positions)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    slots = torch.tensor([5, 0, 33, 17, 2])
    quantized = kv_dtype == torch.int8
    expected_cache = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32, kv_dtype=kv_dtype, quantized=quantized)
    qk = rotary.apply(qkv[:, : (heads + kv_heads) * dim].view(tokens, -1, dim), cos, sin)
    v = qkv[:, (heads + kv_heads) * dim :].view(tokens, kv_heads, dim)
    expected_cache.write(0, slots, qk[:, heads:], v)
    cache = PagedKVCache(1, 4, 16, kv_heads, dim, torch.float32, kv_dtype=kv_dtype, quantized=quantized)
    fused = qkv.clone()
    scales = tuple(cache.scales[0]) if cache.scales is not None else ()
    native.rotary_kv_write(fused, cos, sin, cache.kv[0, 0], cache.kv[0, 1], slots, heads, kv_heads, *scales)
    assert torch.allclose(fused[:, : (heads + kv_heads) * dim].view(tokens, -1, dim), qk, atol=1e-6)
    assert torch.equal(fused[:, (heads + kv_heads) * dim :], qkv[:, (heads + kv_heads) * dim :])  # v untouched
    if quantized:
        assert cache.scales is not None and expected_cache.scales is not None
        assert torch.allclose(cache.scales, expected_cache.scales, rtol=1e-6)
        assert (cache.kv.int() - expected_cache.kv.int()).abs().max() <= 1
        assert (cache.kv == expected_cache.kv).float().mean() > 0.99
    elif kv_dtype == torch.float32:
        assert torch.allclose(cache.kv, expected_cache.kv, atol=1e-6)
    else:  # the same rotated values (to float32's last bits) round to the same bf16
        assert (cache.kv.float() - expected_cache.kv.float()).abs().max() <= 2**-7 * expected_cache.kv.abs().max()
        assert (cache.kv == expected_cache.kv).float().mean() > 0.99


@needs_native
def test_paged_attention_over_an_int8_cache_matches_its_dequantized_values():
    from tenor.models.layers import PagedKVCache

    gen = torch.Generator().manual_seed(8)
    heads, kv_heads, dim, block_size = 6, 2, 32, 16
    cache = PagedKVCache(1, 8, block_size, kv_heads, dim, torch.float32, quantized=True)
    slots = torch.randperm(8 * block_size, generator=gen)[:40]
    cache.write(0, slots, torch.randn(40, kv_heads, dim, generator=gen), torch.randn(40, kv_heads, dim, generator=gen))
    k, v = cache.read(0, torch.arange(8 * block_size))  # dequantized [K, S, E]
    table, lengths = torch.tensor([[3, 1, 6], [0, 7, 2]]), torch.tensor([40, 33])
    q = torch.randn(2, heads, dim, generator=gen)
    out = native.paged_attention(
        q,
        cache.kv[0, 0],
        cache.kv[0, 1],
        table,
        lengths,
        block_size,
        48,
        native.AttentionScratch(),
        cache.scales[0, 0],
        cache.scales[0, 1],
    )
    expected = native.paged_attention(
        q, k.contiguous(), v.contiguous(), table, lengths, block_size, 48, native.AttentionScratch()
    )
    assert torch.allclose(out, expected, atol=1e-5)


@needs_native
@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (8, 1, 64), (4, 2, 128), (3, 1, 80)])
@pytest.mark.parametrize("kv", ["float32", "bfloat16", "int8"])
def test_prompt_rows_match_causal_sdpa_over_their_cached_prefix(heads, kv_heads, dim, kv):
    """A prompt chunk after a cached prefix (rows seeing 20..64 tokens) beside a second prompt's
    rows, in tiles: each row is what torch's attention gives over the K/V the cache holds. Head dims
    64 and 128 take the register-blocked prompt tiles where the CPU has AVX2 (8 x 8 = 64 query
    vectors: two lane groups), 80 the per-row dots."""
    from tenor.models.layers import PagedKVCache

    gen = torch.Generator().manual_seed(11)
    block_size, num_blocks = 16, 12
    cache = PagedKVCache(1, num_blocks, block_size, kv_heads, dim, torch.float32, quantized=kv == "int8")
    slots = torch.arange(num_blocks * block_size)
    values = [torch.randn(len(slots), kv_heads, dim, generator=gen) for _ in "kv"]
    if kv == "bfloat16":
        values = [t.to(torch.bfloat16).float() for t in values]
    cache.write(0, slots, *values)
    k, v = (t.contiguous() for t in cache.read(0, slots))  # what the cache holds, as float32 [K, S, E]
    first, second = torch.tensor([7, 2, 9, 4]), torch.tensor([3, 5, 1, 8])
    table = torch.stack([first] * 45 + [second] * 19)
    lengths = torch.cat([torch.arange(20, 65), torch.arange(1, 20)])
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    if kv == "int8":
        stored = (cache.kv[0, 0], cache.kv[0, 1])
        scales = (cache.scales[0, 0], cache.scales[0, 1])
    else:
        stored, scales = (k.to(getattr(torch, kv)), v.to(getattr(torch, kv))), (None, None)
    out = native.paged_attention(q, *stored, table, lengths, block_size, 64, native.AttentionScratch(), *scales)
    for row, (blocks, length) in enumerate(zip(table, lengths.tolist())):
        seen = (blocks[:, None] * block_size + torch.arange(block_size)).reshape(-1)[:length]
        kb, vb = (t[:, seen].repeat_interleave(heads // kv_heads, 0) for t in (k, v))
        expected = F.scaled_dot_product_attention(q[row][:, None], kb, vb)[:, 0]
        torch.testing.assert_close(out[row], expected, atol=2e-5, rtol=1e-5, msg=f"row {row}")


def _half_linear_reference(x, weight16, bias):
    return F.linear(x.double(), weight16.double(), None if bias is None else bias.double()).float()


@needs_native
@pytest.mark.parametrize("rows", [1, 2, 8])
def test_float_weights_are_read_in_place_and_match_the_float_product(rows):
    gen = torch.Generator().manual_seed(7)
    weight16 = (torch.randn(40, 96, generator=gen) * 0.05).half()
    weight16[0, :3] = torch.tensor([6.1e-5, -3e-7, 65504.0]).half()  # a normal, a subnormal, the largest half
    bias = torch.randn(40, generator=gen)
    x = torch.randn(rows, 96, generator=gen)
    empty = torch.empty(0)
    weight32 = torch.randn(40, 96, generator=gen)
    for b in (bias, None):
        got = native.block_linear(x, weight16, 16, empty, empty, b)
        assert torch.allclose(got, _half_linear_reference(x, weight16, b), rtol=1e-5, atol=1e-4)
        got = native.block_linear(x, weight32, 32, empty, empty, b)
        assert torch.allclose(got, F.linear(x, weight32, b), rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_float_weights_without_f16c_match_the_same_product(tmp_path):
    """The portable build (no -march: no AVX2, no F16C) converts halves in C; the same products."""
    import ctypes
    import subprocess

    library = tmp_path / "portable.so"
    flags = [f for f in native.FLAGS if f != "-march=native"]
    subprocess.run(["gcc", *flags, "-o", str(library), *map(str, native.SOURCES), "-lm"], check=True)
    lib = ctypes.CDLL(str(library))
    lib.tenor_block_linear_f32.argtypes = (
        [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4
    )
    gen = torch.Generator().manual_seed(8)
    weight16 = (torch.randn(24, 64, generator=gen) * 0.05).half()
    weight16[0, :4] = torch.tensor([6.1e-5, -3e-7, 65504.0, 0.0]).half()
    x, out = torch.randn(3, 64, generator=gen), torch.empty(3, 24)
    lib.tenor_block_linear_f32(x.data_ptr(), weight16.data_ptr(), 16, None, None, None, out.data_ptr(), 3, 64, 24, 1)
    assert torch.allclose(out, _half_linear_reference(x, weight16, None), rtol=1e-5, atol=1e-4)
    weight32 = torch.randn(24, 64, generator=gen)
    lib.tenor_block_linear_f32(x.data_ptr(), weight32.data_ptr(), 32, None, None, None, out.data_ptr(), 3, 64, 24, 1)
    assert torch.allclose(out, F.linear(x, weight32), rtol=1e-5, atol=1e-4)


@needs_native
@pytest.mark.parametrize(
    "quantize, streams, kv8",
    [("int8", 3, False), ("fp16", 3, False), ("none", 3, False), ("int8", 12, False), ("int8a8", 12, False)]
    + [("int8a8", 3, False)]  # 2-8 rows on the integer GEMM where it serves, 1 row on the decode kernel
    + [("int8", 3, True), ("int8a8", 12, True)],
)
def test_fused_llama_steps_match_the_layer_by_layer_path(monkeypatch, quantize, streams, kv8):
    """Every step of a few streams on int8 (float16, float32) weights, prompt steps and decode steps,
    runs both ways on the same cache; the logits agree (the fused call writes the same k/v the layer
    path then rewrites). Past the decode kernel's 8 rows, the fused step runs each linear on the
    integer GEMM, as the layer path's big batches do where that GEMM serves. With an int8 cache
    (kv8), a k the two paths rotate a last bit apart can round to the next level, so the logits
    agree less closely."""
    from tenor import registry
    from tenor.engine.options import EngineOptions
    from tenor.models.decoder import DecoderLM
    from tenor.models.kernels import int8_gemm_applies
    from tenor.models.llama import LlamaModel

    if streams > native.INT8_MAX_ROWS and not int8_gemm_applies(8, quantize == "int8a8"):
        pytest.skip(f"big batches of --quantize {quantize} take a library GEMM on this CPU, not tenor's integer GEMM")
    differences: list[float] = []
    fused_rows: list[int] = []
    kinds: set[str] = set()
    fused_forward = LlamaModel.forward

    def both(self, input_ids, positions, cache, batch, logits_rows):
        fused = fused_forward(self, input_ids, positions, cache, batch, logits_rows)
        if self._can_fuse(cache, batch, len(input_ids)):
            assert self._fused_layer_weights() is not None
            layered = DecoderLM.forward(self, input_ids, positions, cache, batch, logits_rows)
            differences.append((fused - layered).abs().max().item())
            fused_rows.append(len(input_ids))
            kinds.add("prompt" if batch.prefills else "decode")
        return fused

    monkeypatch.setattr(LlamaModel, "forward", both)
    servable = registry.get("test.TinyLlamaRandom").with_overrides(quantize=quantize, max_batch_size=16)
    prompts = [tuple(range(5 + i, 40 + 3 * i)) for i in range(streams)]
    _run_streams(servable, EngineOptions(warmup=False, quantize_kv_cache=kv8), prompts, max_tokens=24)
    assert len(differences) >= 20
    assert max(fused_rows) >= streams
    if streams > native.INT8_MAX_ROWS and native.prompt_rows_pay():  # prompt rows on the integer GEMM too
        assert kinds == {"prompt", "decode"}
    assert max(differences) < (1e-2 if kv8 else 1e-4), differences


@needs_native
def test_a_fused_step_times_each_kind_of_op_when_asked_and_computes_the_same(monkeypatch):
    """op_seconds (benchmarks/step_profile.py's view inside a fused step) only reads the clock: each
    step run again without it gives the same bits, and every kind of op took some time."""
    from tenor import registry
    from tenor.engine.options import EngineOptions

    fused_layers = native.llama_layers
    totals = torch.zeros(len(native.FUSED_OPS), dtype=torch.float64)
    steps: list[int] = []

    def timed_and_again(x, *args, **kwargs):
        again = x.clone()
        op_seconds = torch.zeros(len(native.FUSED_OPS), dtype=torch.float64)
        fused_layers(x, *args, **kwargs, op_seconds=op_seconds)
        fused_layers(again, *args, **kwargs)  # the same k/v to the same slots
        assert torch.equal(x, again)
        totals.add_(op_seconds)
        steps.append(x.shape[0])

    monkeypatch.setattr(native, "llama_layers", timed_and_again)
    servable = registry.get("test.TinyLlamaRandom").with_overrides(quantize="int8a8", max_batch_size=16)
    _run_streams(servable, EngineOptions(warmup=False), [tuple(range(5, 30)), tuple(range(7, 19))], max_tokens=6)
    assert len(steps) >= 6 and max(steps) > native.INT8_MAX_ROWS  # decode steps and a prompt step
    assert all(seconds > 0 for seconds in totals.tolist()), dict(zip(native.FUSED_OPS, totals.tolist()))
    with pytest.raises(ValueError, match="op_seconds must be contiguous float64"):
        fused_layers(*([None] * 15), op_seconds=torch.zeros(3))


@needs_native
def test_big_batches_keep_bf16_between_their_gemms_and_give_the_same_numbers(monkeypatch):
    """Where big batches run as bf16 GEMMs, the MLP's activation and the residual adds take the
    GEMMs' bf16 output as it is; every layer's output equals the path through float32 exactly."""
    from tenor import registry
    from tenor.engine.options import EngineOptions
    from tenor.models import kernels, layers
    from tenor.models.llama import LlamaBlock

    if not kernels.bf16_batches_apply():
        pytest.skip("big batches run as bf16 GEMMs only where the CPU computes bf16 natively")
    differences: list[float] = []
    forward = LlamaBlock.forward

    def both(self, x, *args):
        out = forward(self, x, *args)
        if self.down.computes_bf16(x.shape[0]):
            with monkeypatch.context() as patch:
                patch.setattr(layers.ParallelLinear, "computes_bf16", lambda linear, rows: False)
                differences.append((out - forward(self, x, *args)).abs().max().item())
        return out

    monkeypatch.setattr(LlamaBlock, "forward", both)
    servable = registry.get("test.TinyLlamaRandom").with_overrides(quantize="int8")
    prompts = [tuple(range(5 + i, 45 + 7 * i)) for i in range(3)]
    _run_streams(servable, EngineOptions(warmup=False), prompts, max_tokens=4)
    assert differences and max(differences) == 0.0, differences


@needs_native
@pytest.mark.parametrize("quantize_kv_cache", [False, True])
def test_prompt_rows_attend_from_the_cache_as_torch_does(monkeypatch, quantize_kv_cache):
    """Steps that mix decodes with prompt chunks (some continuing a prompt already partly cached)
    run attention for every row through the native kernel; each layer's output matches torch's
    path (decodes batched, prompts through SDPA) on the same cache, float32 or int8."""
    from tenor import registry
    from tenor.engine.options import EngineOptions
    from tenor.models import layers, llama

    differences: list[float] = []
    native_path = layers.paged_attention

    def both(q, k, v, cache, layer, batch, written=False):
        out = native_path(q, k, v, cache, layer, batch, written)
        if batch.row_blocks is not None:
            reference = native_path(q, k, v, cache, layer, dataclasses.replace(batch, row_blocks=None), True)
            differences.append((out - reference).abs().max().item())
        return out

    monkeypatch.setattr(llama, "paged_attention", both)
    monkeypatch.setattr(native, "prompt_rows_pay", lambda: True)  # where it does not pay it must still be right
    options = EngineOptions(warmup=False, max_num_batched_tokens=24, quantize_kv_cache=quantize_kv_cache)
    prompts = [tuple(range(5 + i, 45 + 7 * i)) for i in range(4)]
    # later prompts arrive while earlier ones decode
    _run_streams(registry.get("test.TinyLlamaRandom"), options, prompts, max_tokens=8, stagger_s=0.05)
    assert len(differences) >= 10
    # int8: a fresh prompt's torch path attends to its own k/v before they are quantized, the
    # kernel (like every later decode step) to the cached int8 values.
    assert max(differences) < (2e-2 if quantize_kv_cache else 1e-4), differences


def _run_streams(servable, options, prompts: list[tuple[int, ...]], max_tokens: int, stagger_s: float = 0.0) -> None:
    """Every prompt as its own greedy stream through a real engine, the i-th starting i * stagger_s
    seconds in."""
    import asyncio

    from tenor.engine.api import GenerateRequest, SamplingParams
    from tenor.engine.llm_engine import LLMEngine

    async def main() -> None:
        engine = LLMEngine(servable, None, options)
        await engine.start()
        try:

            async def one(i: int, prompt: tuple[int, ...]) -> None:
                await asyncio.sleep(stagger_s * i)
                request = GenerateRequest(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
                async for _ in engine.generate(request):
                    pass

            await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        finally:
            await engine.stop()

    asyncio.run(main())

"""Block weights (tenor/models/block_weights.py): the C passes give the bytes of their torch
forms, GGUF's Q4_1 and Q8_0 blocks land on the grids exactly, and int8_gemm's layout."""

import pytest
import torch
import torch.nn.functional as F

from tenor.models import block_weights, native

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler, or TENOR_NATIVE_KERNELS=0")


def q4_1_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """Weights made of GGUF Q4_1 blocks: min + d * q4, q4 in 0..15 spanning 0 and 15."""
    gen = torch.Generator().manual_seed(seed)
    blocks = in_features // 32
    d = torch.rand(out_features, blocks, 1, generator=gen) * 0.01
    low = torch.randn(out_features, blocks, 1, generator=gen) * 0.1
    q4 = torch.randint(0, 16, (out_features, blocks, 32), generator=gen)
    q4[..., 0], q4[..., 1] = 0, 15
    return (low + d * q4).reshape(out_features, in_features)


@needs_native
def test_block_quantizer_gives_torchs_bytes():
    gen = torch.Generator().manual_seed(11)
    q8_0 = torch.randint(-127, 128, (16, 128), generator=gen).float() * 0.003  # symmetric blocks
    edge = torch.randn(6, 64, generator=gen)
    edge[0], edge[1, :32], edge[2, :32] = 0.0, -0.0, 1e-30  # flat and tiny blocks
    edge[3, :32] = torch.arange(32.0)  # a block on its span's grid, with ties at half a step
    for weight in (torch.randn(40, 96, generator=gen) * 0.05, q4_1_weight(24, 128, seed=12), q8_0, edge):
        for ours, theirs in zip(
            block_weights.quantize_u8_blocks(weight), block_weights.quantize_u8_blocks_torch(weight)
        ):
            assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)


@needs_native
def test_nibble_levels_give_torchs_bytes():
    gen = torch.Generator().manual_seed(13)
    for weight in (q4_1_weight(24, 128, seed=14), q4_1_weight(8, 32, seed=15)):
        q, scales, mins = block_weights.quantize_u8_blocks(weight)
        ours, theirs = block_weights.nibble_blocks(q, scales, mins), block_weights.nibble_blocks_torch(q, scales, mins)
        assert ours is not None and theirs is not None
        for field in ("levels", "packed", "steps", "offsets"):
            assert torch.equal(getattr(ours, field), getattr(theirs, field)), field
    q, scales, mins = block_weights.quantize_u8_blocks(q4_1_weight(8, 64, seed=16))
    q[7, 63] += 1  # one level off the 4-bit grid, in the last block
    assert (
        block_weights.nibble_blocks(q, scales, mins) is None
        and block_weights.nibble_blocks_torch(q, scales, mins) is None
    )
    q = torch.randint(0, 16, (4, 64), generator=gen, dtype=torch.uint8) * 17  # every level, 0 and 255 too
    nibbles = block_weights.nibble_blocks(q, scales[:4], mins[:4])
    assert nibbles is not None and torch.equal(nibbles.levels, q // 17)
    assert torch.equal(
        torch.cat([nibbles.packed.view(4, 2, 16) & 15, nibbles.packed.view(4, 2, 16) >> 4], -1).view(4, 64), q // 17
    )


def test_only_q4_1_blocks_pack_to_nibbles():
    q, scales, mins = block_weights.quantize_u8_blocks(q4_1_weight(8, 64, seed=9))
    assert block_weights.nibble_blocks(q, scales, mins) is not None
    q, scales, mins = block_weights.quantize_u8_blocks(torch.randn(8, 64) * 0.05)
    assert block_weights.nibble_blocks(q, scales, mins) is None


def test_q4_1_blocks_land_on_the_u8_grid_exactly():
    """A GGUF Q4_1 block is min + d * q4, q4 in 0..15: the 8-bit grid's step is d / 17."""
    gen = torch.Generator().manual_seed(6)
    d, low = torch.rand(8, 2, 1, generator=gen) * 0.01, torch.randn(8, 2, 1, generator=gen) * 0.1
    q4 = torch.randint(0, 16, (8, 2, 32), generator=gen)
    q4[..., 0], q4[..., 1] = 0, 15  # Q4_1 blocks span their own minimum and maximum
    weight = (low + d * q4).reshape(8, 64)
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    dequantized = (q.view(8, 2, 32).float() * scales[..., None] + mins[..., None]).view(8, 64)
    assert torch.allclose(dequantized, weight, atol=1e-6)


def test_q8_0_blocks_land_on_the_u8_grid_exactly():
    """A GGUF Q8_0 block is d * q, q in -127..127 with some |q| = 127: the symmetric grid."""
    gen = torch.Generator().manual_seed(7)
    d = torch.rand(8, 2, 1, generator=gen) * 0.001
    q8 = torch.randint(-127, 128, (8, 2, 32), generator=gen)
    q8[..., 0] = 127
    weight = (d * q8).reshape(8, 64)
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    dequantized = (q.view(8, 2, 32).float() * scales[..., None] + mins[..., None]).view(8, 64)
    assert torch.allclose(dequantized, weight, atol=1e-7)


def test_pack_puts_four_inputs_of_eight_outputs_in_each_step():
    levels = (torch.arange(16 * 64) % 16).to(torch.uint8).view(16, 64)
    levels[9, 37] = 3  # output 9 is tile 1's output 1; input 37 is block 1, step 1 (odd), input 1
    levels[9, 33] = 12  # the same output's input 1 of step 0 (even): the same byte, low nibble
    steps, offsets = torch.rand(16, 2), torch.rand(16, 2)
    packed = block_weights.int8_gemm_pack(levels, steps, offsets)
    assert packed.levels.shape == (2, 2, 128) and packed.out_features == 16  # two 4-bit levels a byte
    assert packed.levels[1, 1, 32 * 0 + 4 * 1 + 1] == 12 | (3 << 4)
    assert packed.levels[1, 1, 32 * 1 + 4 * 1 + 1] == levels[9, 32 + 8 + 1] | (levels[9, 32 + 12 + 1] << 4)
    assert packed.steps[1, 1, 1] == steps[9, 1] and packed.offsets[1, 0, 7] == offsets[15, 0]
    with pytest.raises(ValueError, match="multiple of 8"):
        block_weights.int8_gemm_pack(levels[:12], steps[:12], offsets[:12])
    signed = block_weights.int8_gemm_pack(levels.to(torch.int8) - 8, steps, offsets)
    assert signed.bits == 8 and signed.levels[1, 1, 16 * 2 + 2 * 1 + 1] == 256 - 5  # input 37: step 2, input 1
    with pytest.raises(ValueError, match="4-bit levels"):
        block_weights.int8_gemm_pack(levels * 2, steps, offsets)


def fixed_steps_of(packed: block_weights.Int8GemmWeights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fixed-steps pack's steps as int16 [OUT / 8, IN / 32, 16], its units [OUT / 8, 8] and its
    steps back in float32 [OUT, IN / 32] (step * unit)."""
    tiles, blocks = packed.levels.shape[:2]
    split = tiles * blocks * 32
    fixed = packed.steps[:split].view(torch.int16).view(tiles, blocks, 16)
    units = packed.steps[split:].view(torch.float32).view(tiles, 8)
    floats = fixed[..., ::2].float() * units[:, None, :]
    return fixed, units, floats.transpose(1, 2).reshape(tiles * 8, blocks)


def test_fixed_steps_hold_each_step_to_half_a_unit_of_its_outputs_largest():
    """Builds without VNNI read 4-bit weights' steps as int16: each output's largest step is 32767
    units, every step (either sign) within half a unit, the offsets in the same units."""
    gen = torch.Generator().manual_seed(5)
    levels = torch.randint(0, 16, (16, 96), generator=gen, dtype=torch.uint8)
    steps = torch.rand(16, 3, generator=gen) * 0.01
    steps[3, 1] *= -1.0  # Q4_0's steps may be negative
    steps[4, 0] = 1e-6  # a block far finer than its output's largest
    steps[9] = 0.0  # an output of zeros
    offsets = torch.randn(16, 3, generator=gen) * 0.05
    packed = block_weights.int8_gemm_pack(levels, steps, offsets, fixed_steps=True)
    assert packed.fixed_steps and packed.steps.dtype == torch.uint8
    fixed, units, floats = fixed_steps_of(packed)
    assert torch.equal(fixed[..., ::2], fixed[..., 1::2])  # each output's step twice
    largest = steps.abs().amax(dim=1)
    assert torch.allclose(units.reshape(16), torch.where(largest > 0, largest / 32767, torch.ones(16)))
    assert int(fixed.abs().max()) == 32767 and fixed[1, :, 2:4].eq(0).all()  # output 9: tile 1, output 1
    assert ((floats - steps).abs() <= 0.5 * units.reshape(16, 1) * (1 + 1e-6)).all()
    in_units = packed.offsets.transpose(1, 2).reshape(16, 3) * units.reshape(16, 1)
    assert torch.allclose(in_units, offsets, rtol=1e-6, atol=0)
    # 8-bit levels keep float steps: their int32 dots take no 16-bit multiplier
    eight = block_weights.int8_gemm_pack(levels.to(torch.int8) - 8, steps, offsets, fixed_steps=True)
    assert not eight.fixed_steps and eight.steps.dtype == torch.float32


def nibbles_of(weight: torch.Tensor) -> block_weights.NibbleBlocks:
    """`weight`'s GGUF Q4_1 blocks, as load_gguf(keep_blocks=True) gives them."""
    nibbles = block_weights.nibble_blocks_torch(*block_weights.quantize_u8_blocks_torch(weight))
    assert nibbles is not None
    return nibbles


def test_nibble_blocks_dequantize_to_their_weight():
    weight = q4_1_weight(16, 96, seed=12)
    nibbles = nibbles_of(weight)
    assert nibbles.shape == (16, 96)
    assert torch.allclose(nibbles.dequantize(), weight, rtol=0, atol=1e-6)
    # the packed form holds the levels: byte j of a block is level j low, level j + 16 high
    blocks = nibbles.levels.view(16, 3, 32)
    assert torch.equal(nibbles.packed.view(16, 3, 16), blocks[..., :16] | (blocks[..., 16:] << 4))


def q8_0_blocks(out_features: int, in_features: int, seed: int) -> block_weights.ByteBlocks:
    """Random GGUF Q8_0 blocks, as load_gguf(keep_blocks=True) gives them: each block's largest
    level is +-127, its step a float16's value."""
    gen = torch.Generator().manual_seed(seed)
    levels = torch.randint(-127, 128, (out_features, in_features), generator=gen, dtype=torch.int8)
    levels.view(out_features, -1, 32)[..., 0] = 127
    steps = (torch.rand(out_features, in_features // 32, generator=gen) * 0.01).half().float()
    return block_weights.ByteBlocks(levels, steps, torch.zeros_like(steps))


def test_byte_blocks_look_up_rows_as_an_embedding_of_their_floats():
    blocks = q8_0_blocks(40, 64, seed=13)
    floats = blocks.dequantize()
    assert blocks.shape == (40, 64)
    assert torch.equal(floats.view(40, 2, 32), blocks.levels.view(40, 2, 32).float() * blocks.steps[..., None])
    with_offsets = block_weights.ByteBlocks(blocks.levels, blocks.steps, blocks.steps * 3.0)
    assert torch.equal(with_offsets.dequantize(), (floats.view(40, 2, 32) + 3.0 * blocks.steps[..., None]).view(40, 64))
    ids = torch.tensor([3, 0, 3, 39])
    rows = blocks.rows(ids)
    assert torch.equal(rows, F.embedding(ids, floats))
    rows.add_(1.0)  # a fresh tensor: the layers run in place on it
    assert torch.equal(blocks.rows(ids), F.embedding(ids, floats))
    with pytest.raises(IndexError):
        blocks.rows(torch.tensor([40]))

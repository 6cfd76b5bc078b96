"""GGUF's block types read as levels, steps and offsets: their values are the gguf package's
(the reference HF transformers reads GGUF files with) bit for bit, and stacked pieces become the
integer kernels' 4-bit or 8-bit blocks."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from tenor.checkpoints import gguf_blocks
from tenor.models.block_weights import ByteBlocks, NibbleBlocks


def k_quant_bytes(qtype: Q, rows: int, blocks: int, seed: int) -> np.ndarray:
    """Random Q4_K / Q5_K super-blocks (the gguf package cannot quantize to them): random bytes
    but for the two float16 scales, which are kept finite."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, blocks, gguf_blocks.BLOCK_TYPES[qtype].nbytes), dtype=np.uint8)
    scales = (rng.standard_normal((rows, blocks, 2)) * 0.01).astype(np.float16)
    raw[..., :4] = scales.view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0])
def test_quantized_blocks_dequantize_to_the_gguf_packages_values(qtype):
    weight = np.random.default_rng(5).standard_normal((70, 3, 96)).astype(np.float32) * 0.05
    weight[0, 0] = 0.0  # a flat block
    data = gguf.quants.quantize(weight, qtype)
    ours, theirs = gguf_blocks.dequantize(data, qtype), gguf.quants.dequantize(data, qtype)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == weight.shape
    assert np.array_equal(ours, theirs)
    data.setflags(write=False)  # as a view of the mapped file is
    assert np.array_equal(gguf_blocks.dequantize(data, qtype), theirs)


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K])
def test_k_quants_dequantize_to_the_gguf_packages_values(qtype):
    data = k_quant_bytes(qtype, rows=6, blocks=3, seed=6)
    ours, theirs = gguf_blocks.dequantize(data, qtype), gguf.quants.dequantize(data, qtype)
    assert ours.shape == theirs.shape == (6, 768)
    assert np.array_equal(ours, theirs)
    levels, steps, offsets = gguf_blocks.read_levels(data, qtype)
    assert levels.shape == (6, 768) and steps.shape == offsets.shape == (6, 24)
    assert int(levels.max()) == (15 if qtype == Q.Q4_K else 31)


def test_pieces_of_4_bit_types_stack_into_nibble_blocks():
    q4_0 = gguf.quants.quantize(np.random.default_rng(7).standard_normal((8, 256)).astype(np.float32), Q.Q4_0)
    q4_k = k_quant_bytes(Q.Q4_K, rows=16, blocks=1, seed=8)
    blocks = gguf_blocks.as_blocks([(Q.Q4_0, q4_0), (Q.Q4_K, q4_k)])
    assert isinstance(blocks, NibbleBlocks) and blocks.shape == (24, 256)
    expected = np.concatenate([gguf.quants.dequantize(q4_0, Q.Q4_0), gguf.quants.dequantize(q4_k, Q.Q4_K)])
    assert torch.equal(blocks.dequantize(), torch.from_numpy(expected))
    # the decode kernel's packed form: byte j of a block holds level j low and level j + 16 high
    levels = blocks.levels.view(24, 8, 32)
    assert torch.equal(blocks.packed.view(24, 8, 16), levels[..., :16] | (levels[..., 16:] << 4))


def test_pieces_with_wider_levels_stack_into_byte_blocks_and_others_into_none():
    weight = np.random.default_rng(9).standard_normal((8, 64)).astype(np.float32)
    q4_1, q5_1 = gguf.quants.quantize(weight, Q.Q4_1), gguf.quants.quantize(weight, Q.Q5_1)
    q5_k = k_quant_bytes(Q.Q5_K, rows=2, blocks=1, seed=10)
    blocks = gguf_blocks.as_blocks([(Q.Q4_1, q4_1), (Q.Q5_1, q5_1)])
    assert isinstance(blocks, ByteBlocks) and blocks.levels.dtype == torch.int8
    expected = np.concatenate([gguf.quants.dequantize(q4_1, Q.Q4_1), gguf.quants.dequantize(q5_1, Q.Q5_1)])
    assert torch.equal(blocks.dequantize(), torch.from_numpy(expected))
    wide = gguf_blocks.as_blocks([(Q.Q5_K, q5_k)])
    assert isinstance(wide, ByteBlocks)
    assert torch.equal(wide.dequantize(), torch.from_numpy(gguf.quants.dequantize(q5_k, Q.Q5_K)))
    # Q6_K (a scale for each 16) and float pieces do not fit one step per 32
    assert gguf_blocks.as_blocks([(Q.Q4_1, q4_1), (Q.Q6_K, np.zeros((8, 210), np.uint8))]) is None
    assert gguf_blocks.as_blocks([(Q.F32, weight)]) is None
    assert gguf_blocks.as_blocks([]) is None

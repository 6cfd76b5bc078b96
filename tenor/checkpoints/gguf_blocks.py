"""GGUF's common block types read as tenor's block weights: every 32 values of a row share a step
and an offset, W = level * step + offset. Q4_0, Q4_1 and Q4_K hold 4-bit levels (NibbleBlocks,
the integer kernels' 4-bit form); Q5_0, Q5_1, Q5_K and Q8_0 hold levels that fit a byte
(ByteBlocks, their 8-bit form). The K-quants' super-blocks of 256 carry a 6-bit scale and minimum
for each 32, so each 32 has its own step and offset exactly. Q6_K (a scale for each 16) and the
2- and 3-bit types do not fit one step per 32; they are dequantized to floats.

The same levels, steps and offsets dequantize these types for the float path, in torch's whole-
tensor ops: the float32 operations of gguf.quants, so the same values
(tests/checkpoints/test_gguf_blocks.py compares them with gguf.quants byte for byte)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from tenor.models.block_weights import Blocks, ByteBlocks, NibbleBlocks, block_values, pack_nibbles

# A type's blocks [n, bytes] -> levels [n, values], steps and offsets [n, values / 32] (float32).
Reader = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class BlockType:
    nbytes: int  # a block's (32 values; 256 for the K-quants' super-blocks)
    bits: int  # 4: levels 0..15; 8: levels that fit an int8 (after the reader's shift)
    read: Reader


def _halves(field: torch.Tensor) -> torch.Tensor:
    """A block field of float16 bytes (the last dimension, 2 bytes) as float32."""
    return field.contiguous().view(torch.float16).float()


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """A Q4 block's 16 bytes [..., 16] as its 32 levels [..., 32]: byte j holds level j (low
    nibble) and level j + 16 (high)."""
    return torch.cat([packed & 15, packed >> 4], dim=-1)


_SHIFTS = torch.arange(8, dtype=torch.uint8)


def _fifth_bits(qh: torch.Tensor) -> torch.Tensor:
    """Q5_0 / Q5_1: a block's 4 bytes of fifth bits [n, 4] -> [n, 32], value i's bit i of them (a
    little-endian uint32)."""
    return ((qh[..., None] >> _SHIFTS) & 1).flatten(-2)


def _k_fifth_bits(qh: torch.Tensor) -> torch.Tensor:
    """Q5_K: a super-block's 32 bytes [n, 32] -> [n, 8, 32], bit i of byte j for value j of its i-th 32."""
    return (qh[:, None, :] >> _SHIFTS[:, None]) & 1


def _q4_0(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    step = _halves(raw[:, :2])
    return _nibbles(raw[:, 2:]), step, -8.0 * step  # W = step * (level - 8)


def _q4_1(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _nibbles(raw[:, 4:]), _halves(raw[:, :2]), _halves(raw[:, 2:4])


def _q8_0(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    step = _halves(raw[:, :2])
    return raw[:, 2:].contiguous().view(torch.int8), step, torch.zeros_like(step)


def _q5_0(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    step = _halves(raw[:, :2])
    levels = _nibbles(raw[:, 6:]) | (_fifth_bits(raw[:, 2:6]) << 4)
    return levels.to(torch.int8) - 16, step, torch.zeros_like(step)  # W = step * (level - 16)


def _q5_1(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    levels = _nibbles(raw[:, 8:]) | (_fifth_bits(raw[:, 4:8]) << 4)
    return levels, _halves(raw[:, :2]), _halves(raw[:, 2:4])


def _k_steps(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K: each 32's step (d * scale) and offset (-dmin * min) from the super-block's two
    float16s and its 12 bytes of 6-bit scales and minimums."""
    d, dmin = _halves(raw[:, :2]), _halves(raw[:, 2:4])
    packed = raw[:, 4:16].reshape(-1, 3, 4)
    low_s, low_m, rest = packed[:, 0], packed[:, 1], packed[:, 2]
    scales = torch.cat([low_s & 63, (rest & 15) | ((low_s >> 2) & 48)], dim=-1)
    minimums = torch.cat([low_m & 63, (rest >> 4) | ((low_m >> 2) & 48)], dim=-1)
    return d * scales.float(), -(dmin * minimums.float())


def _k_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """The K-quants' 128 bytes of low nibbles as 8 x 32 levels: 32 a pair of 32s, the first's low."""
    pairs = qs.reshape(-1, 4, 1, 32)
    return torch.cat([pairs & 15, pairs >> 4], dim=2).reshape(-1, 8, 32)


def _q4_k(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    steps, offsets = _k_steps(raw)
    return _k_nibbles(raw[:, 16:]).reshape(-1, 256), steps, offsets


def _q5_k(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    steps, offsets = _k_steps(raw)
    levels = _k_nibbles(raw[:, 48:]) | (_k_fifth_bits(raw[:, 16:48]) << 4)
    return levels.reshape(-1, 256), steps, offsets


BLOCK_TYPES: dict[Q, BlockType] = {
    Q.Q4_0: BlockType(18, 4, _q4_0),
    Q.Q4_1: BlockType(20, 4, _q4_1),
    Q.Q4_K: BlockType(144, 4, _q4_k),
    Q.Q5_0: BlockType(22, 8, _q5_0),
    Q.Q5_1: BlockType(24, 8, _q5_1),
    Q.Q5_K: BlockType(176, 8, _q5_k),
    Q.Q8_0: BlockType(34, 8, _q8_0),
}


def read_levels(data: np.ndarray, qtype: Q) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A tensor's bytes [rows, row bytes] in one of BLOCK_TYPES as levels [rows, values], steps
    and offsets [rows, values / 32]."""
    kind = BLOCK_TYPES[qtype]
    rows = int(np.prod(data.shape[:-1]))
    raw = torch.from_numpy(np.array(data, copy=not data.flags.writeable)).reshape(-1, kind.nbytes)
    levels, steps, offsets = kind.read(raw)
    return levels.reshape(rows, -1), steps.reshape(rows, -1), offsets.reshape(rows, -1)


def dequantize(data: np.ndarray, qtype: Q) -> np.ndarray:
    """float32 values of a tensor's bytes in one of BLOCK_TYPES, shaped [..., values a row]."""
    values = block_values(*read_levels(data, qtype))
    return values.reshape(*data.shape[:-1], -1).numpy()


def as_blocks(pieces: Sequence[tuple[Q, np.ndarray]]) -> Blocks | None:
    """A weight stacked from pieces (type, bytes [rows, row bytes]) as its blocks: NibbleBlocks where
    every piece holds 4-bit levels, ByteBlocks where each fits a byte, None where a piece's type
    is not in BLOCK_TYPES."""
    if not pieces or any(qtype not in BLOCK_TYPES for qtype, _ in pieces):
        return None
    read = [read_levels(data, qtype) for qtype, data in pieces]
    levels, steps, offsets = (torch.cat(parts) if len(parts) > 1 else parts[0] for parts in zip(*read))
    if all(BLOCK_TYPES[qtype].bits == 4 for qtype, _ in pieces):
        levels = levels.contiguous()
        return NibbleBlocks(levels, steps.contiguous(), offsets.contiguous(), pack_nibbles(levels))
    return ByteBlocks(levels.to(torch.int8).contiguous(), steps.contiguous(), offsets.contiguous())

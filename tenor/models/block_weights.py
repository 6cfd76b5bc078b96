"""Weights in blocks of 32 along IN that share a step and an offset (W ~= level * step + offset),
the form tenor's integer kernels read: made from float weights at load, in their 8-bit and 4-bit
forms, and packed into int8_gemm's layout. The C passes (tenor/csrc/block_quant.c) run where the
kernels are built; each has a torch form beside it, the fallback elsewhere and the reference its
tests compare bytes with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from tenor import hugepages
from tenor.models import native

BLOCK = native.INT8_BLOCK  # weights per step and offset, as GGUF's Q4_1 / Q8_0


def quantize_u8_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight [OUT, IN] (IN a multiple of 32) -> uint8 [OUT, IN], scales and mins [OUT, IN / 32]
    (float32): weight ~= u8 * scale + min, per block of 32.

    Each block takes the better of two grids: from its minimum to its maximum in 255 steps (holds
    a GGUF Q4_1 block exactly: 16 levels, 255 = 15 * 17), or symmetric around zero in steps of
    absmax / 127 (holds a Q8_0 block exactly). tenor/csrc/block_quant.c where the kernels are
    built, the same bytes as quantize_u8_blocks_torch in a tenth of the time or less."""
    lib = native.library()
    if lib is None:
        return quantize_u8_blocks_torch(weight)
    out_features, in_features = weight.shape
    x = weight.float().contiguous()
    q = torch.empty(out_features, in_features, dtype=torch.uint8)
    scales, mins = (torch.empty(out_features, in_features // BLOCK) for _ in range(2))
    blocks = x.numel() // BLOCK
    lib.tenor_quantize_u8_blocks(
        x.data_ptr(), blocks, q.data_ptr(), scales.data_ptr(), mins.data_ptr(), torch.get_num_threads()
    )
    return q, scales, mins


def quantize_u8_blocks_torch(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """quantize_u8_blocks in torch's ops: where the kernels are not built, and their reference."""
    out_features, in_features = weight.shape
    blocks = weight.float().reshape(out_features, in_features // BLOCK, BLOCK)
    low, high = blocks.amin(dim=-1), blocks.amax(dim=-1)
    absmax = torch.maximum(high, -low)
    candidates = [
        (((high - low) / 255.0).clamp(min=1e-12), low),
        ((absmax / 127.0).clamp(min=1e-12), -127.0 * (absmax / 127.0).clamp(min=1e-12)),
    ]
    best_q, best_scale, best_min, best_error = None, None, None, None
    for scale, minimum in candidates:
        q = torch.round((blocks - minimum[..., None]) / scale[..., None]).clamp(0, 255)
        error = (q * scale[..., None] + minimum[..., None] - blocks).abs().amax(dim=-1)
        if best_q is None:
            best_q, best_scale, best_min, best_error = q, scale, minimum, error
            continue
        assert best_scale is not None and best_min is not None and best_error is not None  # set on the first pass
        better = error < best_error
        best_q = torch.where(better[..., None], q, best_q)
        best_scale, best_min = torch.where(better, scale, best_scale), torch.where(better, minimum, best_min)
        best_error = torch.minimum(error, best_error)
    assert best_q is not None and best_scale is not None and best_min is not None  # candidates is not empty
    return (
        best_q.to(torch.uint8).reshape(out_features, in_features).contiguous(),
        best_scale.contiguous(),
        best_min.contiguous(),
    )


def signed_blocks(q: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_u8_blocks' u8 * scale + min as int8 (u8 - 128) * scale + offset, the 8-bit form
    block_linear takes: (int8 weights [OUT, IN], offsets [OUT, IN / 32])."""
    return (q.to(torch.int16) - 128).to(torch.int8), (mins + 128.0 * scales).contiguous()


def block_values(levels: torch.Tensor, steps: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """level * step + offset in float32 [rows, IN], from levels one a byte [rows, IN] and steps and
    offsets [rows, IN / 32]: GGUF's own dequantizing's float32 operations, so its values."""
    rows = levels.shape[0]
    values = levels.reshape(rows, -1, BLOCK).float() * steps[..., None] + offsets[..., None]
    return values.reshape(rows, -1)


@dataclasses.dataclass(frozen=True)
class LevelBlocks:
    """A weight in blocks of 32: W = level * step + offset, levels one a byte [OUT, IN], steps and
    offsets [OUT, IN / 32]."""

    levels: torch.Tensor
    steps: torch.Tensor
    offsets: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        out_features, in_features = self.levels.shape
        return out_features, in_features

    def dequantize(self) -> torch.Tensor:
        """W = level * step + offset in float32, the values GGUF's own dequantizing gives."""
        return block_values(self.levels, self.steps, self.offsets)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` [N] in float32 [N, IN], a fresh tensor: an embedding lookup."""
        return block_values(*(t.index_select(0, ids) for t in (self.levels, self.steps, self.offsets)))


@dataclasses.dataclass(frozen=True)
class NibbleBlocks(LevelBlocks):
    """4-bit blocks (GGUF's Q4_0, Q4_1 and Q4_K): levels 0..15 one a byte (`levels`, int8_gemm_pack's
    form) and two a byte (`packed` [OUT, IN / 2], byte i of a block holding w[i] low and w[i + 16]
    high: block_linear's form)."""

    packed: torch.Tensor


@dataclasses.dataclass(frozen=True)
class ByteBlocks(LevelBlocks):
    """Blocks whose levels fit a byte (GGUF's Q8_0, Q5_0, Q5_1 and Q5_K): int8 levels,
    block_linear's 8-bit form as they are. The default model's tied embedding and LM head (Q8_0):
    its rows are looked up from the blocks (`rows`), 1.125 bytes a value where a float32 table took 4."""


# A weight kept in a GGUF's own blocks, read by the integer kernels as it is.
Blocks = NibbleBlocks | ByteBlocks


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """An embedding table kept in a GGUF type the kernels do not read as blocks (Q6_K, the type
    llama.cpp's Q4_K_M gives a tied embedding; the 2- and 3-bit and IQ types; F16 and BF16): each
    row's own items [V, items a row] (bytes, or 16-bit floats), dequantized as it is looked up
    (`decode`: rows' items -> float32 values [N, width]). Q6_K takes 0.82 bytes a value where a
    float32 table took 4."""

    raw: torch.Tensor
    width: int
    decode: Callable[[np.ndarray], np.ndarray]

    @property
    def shape(self) -> tuple[int, int]:
        return self.raw.shape[0], self.width

    def dequantize(self) -> torch.Tensor:
        """The whole table in float32 (a tied LM head is made from it)."""
        return self._values(self.raw)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` [N] in float32 [N, width], a fresh tensor: an embedding lookup."""
        return self._values(self.raw.index_select(0, ids))

    def _values(self, raw: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.decode(raw.numpy()), dtype=np.float32)).view(-1, self.width)


# A weight kept packed as its checkpoint holds it: blocks the kernels read, or an embedding's rows.
PackedWeight = Blocks | PackedRows


def pack_nibbles(levels: torch.Tensor) -> torch.Tensor:
    """4-bit levels one a byte [OUT, IN] two a byte [OUT, IN / 2], block_linear's form: byte i of
    a block holds level i low and level i + 16 high."""
    split = levels.view(levels.shape[0], -1, 2, BLOCK // 2)  # a block's first 16 levels, then its last
    return (split[:, :, 0] | (split[:, :, 1] << 4)).reshape(levels.shape[0], -1).contiguous()


def nibble_blocks(q: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> NibbleBlocks | None:
    """The 4-bit form of quantize_u8_blocks' output when every block is a Q4_1 block (its 8-bit
    levels all multiples of 17, see quantize_u8_blocks), else None. In one C pass where the kernels
    are built (tenor_nibble_levels), else nibble_blocks_torch: the same bytes."""
    lib = native.library()
    if lib is None:
        return nibble_blocks_torch(q, scales, mins)
    q = q.contiguous()
    levels = torch.empty_like(q)
    packed = torch.empty(q.shape[0], q.shape[1] // 2, dtype=torch.uint8)
    blocks = q.numel() // BLOCK
    if not lib.tenor_nibble_levels(q.data_ptr(), blocks, levels.data_ptr(), packed.data_ptr(), torch.get_num_threads()):
        return None
    return NibbleBlocks(levels, (scales * 17.0).contiguous(), mins.contiguous(), packed)


def nibble_blocks_torch(q: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> NibbleBlocks | None:
    """nibble_blocks in torch's ops: where the kernels are not built, and their reference."""
    if bool((q % 17).any()):
        return None
    levels = q // 17
    packed = pack_nibbles(levels)
    return NibbleBlocks(levels, (scales * 17.0).contiguous(), mins.contiguous(), packed)


@dataclasses.dataclass(frozen=True)
class Int8GemmWeights:
    """A weight in int8_gemm's layout (see tenor/csrc/int8_gemm.c): levels uint8 [OUT / 8, IN / 32,
    128] for bits 4 (0..15, two a byte: a pair of steps in each 32 bytes, the even step's in the
    low nibbles) or [OUT / 8, IN / 32, 256] for bits 8 (int8's bytes), steps and offsets [OUT / 8,
    IN / 32, 8] float32.
    With `fixed_steps` (4-bit, for builds without VNNI: tenor_int8_gemm_fixed_steps), `steps` holds
    each step as int16 in units of its output's largest step / 32767, twice (int16 [OUT / 8, IN / 32,
    16]), followed by each output's unit (float32 [OUT]), in one byte tensor; offsets in those units."""

    levels: torch.Tensor
    bits: int
    steps: torch.Tensor
    offsets: torch.Tensor
    fixed_steps: bool = False

    @property
    def out_features(self) -> int:
        return self.levels.shape[0] * 8


def int8_gemm_pack(
    levels: torch.Tensor, steps: torch.Tensor, offsets: torch.Tensor, fixed_steps: bool = False
) -> Int8GemmWeights:
    """Block weights W ~= level * step + offset (levels [OUT, IN]: uint8 in 0..15, 4-bit, or int8,
    8-bit; steps, offsets [OUT, IN / 32]; OUT a multiple of 8) in int8_gemm's layout; 4-bit ones with
    `fixed_steps` in the form of builds without VNNI (Int8GemmWeights)."""
    out_features, in_features = levels.shape
    if out_features % 8 or in_features % BLOCK:
        raise ValueError(f"int8_gemm needs OUT a multiple of 8 and IN of 32, got {out_features} x {in_features}")
    if levels.dtype == torch.int8:
        bits, inputs = 8, 2  # a step: 2 inputs of 8 outputs (int16 x)
    elif levels.dtype == torch.uint8 and int(levels.max()) <= 15:
        bits, inputs = 4, 4  # a step: 4 inputs of 8 outputs (int8 x)
    else:
        raise ValueError("int8_gemm takes 4-bit levels (uint8, 0..15) or 8-bit ones (int8)")
    tiles, blocks = out_features // 8, in_features // BLOCK
    # [tile, output, block, step, input] -> [tile, block, step, output, input]; a step's inputs
    # move together, so they move as one int32 (bits 4) or int16 (bits 8): a third of the time
    whole_step = torch.int32 if inputs == 4 else torch.int16
    steps_of = levels.contiguous().view(torch.uint8).view(whole_step).reshape(tiles, 8, blocks, 32 // inputs)
    grouped = steps_of.permute(0, 2, 3, 1).contiguous().view(torch.uint8)
    fixed = fixed_steps and bits == 4
    if fixed:
        steps, offsets, units = _fixed_point_steps(steps.float(), offsets.float())
    by_tile = [t.reshape(tiles, 8, blocks).transpose(1, 2).contiguous() for t in (steps, offsets)]
    if fixed:  # each int16 step twice: vpmaddwd takes one per int16 sum, an output has two
        pairs = by_tile[0].unsqueeze(-1).expand(tiles, blocks, 8, 2).reshape(-1)
        by_tile[0] = torch.cat([pairs.view(torch.uint8), units.contiguous().view(torch.uint8)])
    steps, offsets = (hugepages.keep(t if fixed else t.float()) for t in by_tile)
    laid = grouped.reshape(tiles, blocks, 256)
    if bits == 4:  # two steps' levels a byte: the even step's in the low nibbles
        step_pairs = laid.view(tiles, blocks, 4, 2, 32)
        laid = (step_pairs[:, :, :, 0] | (step_pairs[:, :, :, 1] << 4)).reshape(tiles, blocks, 128)
    return Int8GemmWeights(hugepages.keep(laid), bits, steps, offsets, fixed)


def _fixed_point_steps(steps: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps [OUT, IN / 32] as int16 in units of each output's largest step / 32767 (rounded: half a
    unit off at most), offsets in the same units, and the units [OUT] (1 for an output whose steps
    are all zero)."""
    largest = steps.abs().amax(dim=1)
    units = torch.where(largest > 0, largest / 32767.0, torch.ones_like(largest))
    fixed = torch.round(steps / units[:, None]).clamp(-32767, 32767).to(torch.int16)
    return fixed, offsets / units[:, None], units

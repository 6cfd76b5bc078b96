"""Matmul kernels for a linear layer's weight, chosen once at load for the CPU at hand.

Each kernel owns its weight in the layout its library wants and computes x @ W.T (+ bias):

- `DenseKernel`: `F.linear` on the plain weight.
- `OneDnnKernel`: the weight reordered once into oneDNN's blocked layout. Bit-identical to
  `F.linear`; 1.5-2x faster at decode-sized batches on AVX-512/AMX CPUs, where F.linear
  re-lays the weight out on every call, but slower than F.linear at batch 1 on AVX2-only CPUs,
  so it is used only where AVX-512 is present.
- `Fp16Kernel`: float16 weights through FBGEMM's fp16 GEMM (float32 in and out, float32
  accumulation). Half the bytes of float32; on an AVX2 EPYC 1.5-2x faster than float32 at
  batch 32-256 and 6x for the 49152-row LM head at batch 1.
- `Bf16BatchKernel`: bf16 weights through oneDNN for float32 activations (converted on the way
  in and out), on CPUs that compute bf16 natively.
- `DecodeKernel`s: tenor's own kernel (tenor/csrc) for decode-sized batches, a library's GEMM
  for larger ones. `Int8BlockKernel` holds 8-bit (or 4-bit) weights in blocks of 32 with a scale
  and a minimum each, `Fp16DecodeKernel` float16 weights (both with bf16 through oneDNN for big
  batches where the CPU computes bf16 natively, else FBGEMM fp16), `Float32DecodeKernel` float32
  weights (oneDNN or F.linear for big batches; one copy).
- `Int8GemmKernel`: block weights through tenor's integer GEMM, the big batches' kernel of
  `Int8BlockKernel` on CPUs without native bf16 (`int8_gemm_applies`; x in int16 per block of
  32 with `int8`, or int8 with `int8a8`, the default there; faster than FBGEMM's fp16 there,
  benchmarks/RESULTS.md), and with `int8a8` on AVX512-BF16 CPUs without AMX (faster than
  oneDNN's bf16 there).
- `Int8WeightOnlyKernel`: int8 weights with per-row scales (`tenor convert --quantize int8`),
  through torch's fused CPU kernel.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from tenor import hugepages
from tenor.models import block_weights, native
from tenor.models.block_weights import Blocks, ByteBlocks, NibbleBlocks

WEIGHT_FORMATS = ("dense", "fp16", "int8", "int8a8")


class LinearKernel:
    name = "base"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes of weight (and bias) this kernel keeps."""
        raise NotImplementedError

    def decoding(self, x: torch.Tensor) -> torch.Tensor:
        """x of a decode step (no prompt's rows among them): where a kernel has a faster form for
        those, it overrides this."""
        return self(x)

    def bf16_rows(self, rows: int) -> bool:
        """Whether a batch of `rows` runs as a bf16 GEMM: then `bf16` gives its output as the GEMM
        does, without the round trip through float32."""
        return False

    def bf16(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., IN] float32 or bf16 -> x @ W.T in bf16, where `bf16_rows` says so."""
        raise NotImplementedError(f"{self.name} kernels do not compute in bf16")


def _nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class DenseKernel(LinearKernel):
    name = "dense"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def nbytes(self) -> int:
        return _nbytes(self.weight, self.bias)


class OneDnnKernel(LinearKernel):
    """oneDNN's linear on a weight in its blocked layout (`onednn_pack`) or a plain one (nearly
    as fast on an AVX-512 EPYC, 1.4-1.7x F.linear's float32 speed there, and readable by tenor's
    own kernel)."""

    name = "onednn"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def nbytes(self) -> int:
        return _nbytes(self.weight, self.bias)


class Fp16Kernel(LinearKernel):
    name = "fp16"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.out_features = weight.shape[0]
        self._bytes = weight.numel() * 2 + _nbytes(bias)
        self.packed = torch.ops.quantized.linear_prepack_fp16(
            weight.float().contiguous(), None if bias is None else bias.float()
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)
        flat = torch.ops.quantized.linear_dynamic_fp16(x.reshape(-1, x.shape[-1]), self.packed)
        return flat.view(*x.shape[:-1], self.out_features)

    def nbytes(self) -> int:
        return self._bytes


class Bf16BatchKernel(LinearKernel):
    """Big batches (prefill, many streams) in bf16 through oneDNN, float32 in and out: on a CPU
    that computes bf16 natively (AVX512-BF16, AMX) 1.5-2.2x FBGEMM's fp16 GEMM at 64-256 rows
    (AVX512-BF16 EPYC, benchmarks/RESULTS.md). The decode kernels' batched half where
    `bf16_batches_apply`; 2 bytes a weight, as FBGEMM's fp16 copy."""

    name = "bf16"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        plain = weight.to(torch.bfloat16).contiguous()
        packed = onednn_pack(plain)
        self.inner = OneDnnKernel(plain if packed is None else packed, None if bias is None else bias.bfloat16())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.bf16(x).float()

    def bf16_rows(self, rows: int) -> bool:
        return True

    def bf16(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(torch.bfloat16))

    def nbytes(self) -> int:
        return self.inner.nbytes()


def bf16_batches_apply() -> bool:
    """Whether big batches go through `Bf16BatchKernel` here: oneDNN applies and the CPU computes
    bf16 natively (elsewhere bf16 is emulated, ~10x slower than float32)."""
    from tenor.hardware import cpu_info

    return cpu_info().native_bf16 and onednn_applies(torch.empty(0, dtype=torch.bfloat16))


def batched_kernel(weight: torch.Tensor, bias: torch.Tensor | None) -> LinearKernel:
    """The library GEMM a decode kernel hands big batches to: bf16 where the CPU computes it
    natively, else FBGEMM's fp16."""
    return Bf16BatchKernel(weight, bias) if bf16_batches_apply() else Fp16Kernel(weight, bias)


class DecodeKernel(LinearKernel):
    """Decode-sized batches (a few rows, bound by the weight bytes each step reads) through
    tenor's native kernel on a compact form of the weight (`q`, read in place); larger batches
    (prefill, many streams; bound by arithmetic) through `batched`, a library's GEMM. Subclasses
    choose the two."""

    q: torch.Tensor
    bits: int  # tenor_block_linear_f32's weight format: 4 or 8 (blocks with scales), 16 or 32 (floats)
    scales: torch.Tensor
    offsets: torch.Tensor

    def __init__(self, batched: LinearKernel, out_features: int, bias: torch.Tensor | None) -> None:
        self.batched, self.out_features = batched, out_features
        self.bias = None if bias is None else bias.float().contiguous()
        self.scales = self.offsets = torch.empty(0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > native.INT8_MAX_ROWS:
            return self.batched(x)
        flat = native.block_linear(
            x.reshape(rows, x.shape[-1]).contiguous(), self.q, self.bits, self.scales, self.offsets, self.bias
        )
        return flat.view(*x.shape[:-1], self.out_features)

    def decoding(self, x: torch.Tensor) -> torch.Tensor:
        """x of a decode step (each row a sequence's next token, no prompt's): from GEMM_MIN_ROWS rows
        on the integer GEMM where `batched` is that (tenor_llama_layers_f32 chooses the same way).
        A short prompt's rows keep the decode kernel's int16 x, the more exact."""
        rows = x.numel() // x.shape[-1]
        if rows >= native.GEMM_MIN_ROWS and isinstance(self.batched, Int8GemmKernel):
            return self.batched(x)
        return self(x)

    def bf16_rows(self, rows: int) -> bool:
        return rows > native.INT8_MAX_ROWS and self.batched.bf16_rows(rows)

    def bf16(self, x: torch.Tensor) -> torch.Tensor:
        return self.batched.bf16(x)

    def nbytes(self) -> int:
        return self.batched.nbytes() + _nbytes(self.q, self.scales, self.offsets, self.bias)


class Int8GemmKernel(LinearKernel):
    """Block weights through tenor's integer GEMM (tenor/csrc/int8_gemm.c): the big batches' kernel
    of `Int8BlockKernel` where `int8_gemm_applies`. x is quantized per block of 32: to int16
    against 8-bit levels (any block weights, 4-bit ones shifted to signed: as exact as FBGEMM's
    fp16 weights), or to int8 against 4-bit levels (`int8a8`, the default where this kernel
    serves: llama.cpp's numerics, ~1.4-2.5x faster, 96.9-97.5 % prefill top-1 on the default
    model against 98-100 %).
    One byte a weight and 0.25 for the steps and offsets."""

    name = "int8_gemm"

    def __init__(self, weights: block_weights.Int8GemmWeights, bias: torch.Tensor | None) -> None:
        self.weights = weights
        self.bias = None if bias is None else bias.float().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = native.int8_gemm(x.reshape(-1, x.shape[-1]).float().contiguous(), self.weights, self.bias)
        return flat.view(*x.shape[:-1], self.weights.out_features)

    def nbytes(self) -> int:
        return _nbytes(self.weights.levels, self.weights.steps, self.weights.offsets, self.bias)


def int8_gemm_applies(out_features: int, int8_activations: bool = False) -> bool:
    """Whether block weights take Int8GemmKernel for big batches here, for `--quantize int8` or
    (`int8_activations`) `int8a8`: where the integer GEMM serves it (`tenor.hardware.integer_gemm_serves`),
    for OUT a multiple of the kernel's 8-output tiles."""
    from tenor.hardware import cpu_info, integer_gemm_serves

    return out_features % 8 == 0 and integer_gemm_serves(cpu_info(), native.int8_gemm_width(), int8_activations)


class Int8BlockKernel(DecodeKernel):
    """8-bit weights in blocks of 32 that share a scale and a minimum (1.25 bytes a weight with the
    scales; holds GGUF's Q4_1 and Q8_0 blocks exactly), or 4 bits (0.75 bytes) when every block
    is a Q4_1 block, as in the default model's GGUF. With a 2-byte copy for big batches
    (`batched_kernel`): 3.25 bytes a weight in all, still less than float32's 4; where
    `int8_gemm_applies`, a 1.25-byte one for the integer GEMM instead (`Int8GemmKernel`: 2 bytes in all).
    `int8_activations` (`--quantize int8a8`): int8 x against 4-bit levels there."""

    name = "int8"

    def __init__(
        self, weight: torch.Tensor | Blocks, bias: torch.Tensor | None, int8_activations: bool = False
    ) -> None:
        bits, decode_q, steps, offsets, nibbles = _block_form(weight)
        if not int8_gemm_applies(weight.shape[0], int8_activations):
            floats = weight.dequantize() if isinstance(weight, Blocks) else weight
            batched: LinearKernel = batched_kernel(floats, bias)
        elif nibbles is not None and int8_activations:  # levels 0..15 against int8 x
            packed = block_weights.int8_gemm_pack(nibbles.levels, steps, offsets, native.int8_gemm_fixed_steps())
            batched = Int8GemmKernel(packed, bias)
        elif nibbles is not None:  # the same weights as int8 levels (level - 8) against int16 x
            signed = nibbles.levels.to(torch.int8) - 8
            batched = Int8GemmKernel(block_weights.int8_gemm_pack(signed, steps, offsets + 8.0 * steps), bias)
        else:
            batched = Int8GemmKernel(block_weights.int8_gemm_pack(decode_q, steps, offsets), bias)
        super().__init__(batched, weight.shape[0], bias)
        self.bits, self.q, self.scales, self.offsets = bits, *(hugepages.keep(t) for t in (decode_q, steps, offsets))


def _block_form(
    weight: torch.Tensor | Blocks,
) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, NibbleBlocks | None]:
    """The decode kernel's form of `weight`: bits (4 or 8), levels, steps and offsets, and the
    4-bit levels one a byte where bits is 4. A GGUF's blocks as they were read; float weights
    in blocks derived from them, 4-bit where every block is a Q4_1 block (half the bytes, the
    same weights)."""
    if isinstance(weight, ByteBlocks):  # GGUF's Q8_0, Q5_* blocks
        return 8, weight.levels, weight.steps, weight.offsets, None
    if isinstance(weight, NibbleBlocks):  # GGUF's Q4_* blocks
        return 4, weight.packed, weight.steps, weight.offsets, weight
    q, scales, mins = block_weights.quantize_u8_blocks(weight)
    nibbles = block_weights.nibble_blocks(q, scales, mins)
    if nibbles is None:
        decode_q, offsets = block_weights.signed_blocks(q, scales, mins)
        return 8, decode_q, scales, offsets, None
    return 4, nibbles.packed, nibbles.steps, nibbles.offsets, nibbles


class Fp16DecodeKernel(DecodeKernel):
    """Float16 weights read in place by tenor's kernel for decode (FBGEMM's packed GEMM has a
    per-call cost made for big batches: at one stream it ran at ~8 GB/s of weights on an AVX2
    EPYC), `batched_kernel` for big batches (FBGEMM's fp16: the same values both ways; or bf16
    where the CPU computes it natively); 4 bytes a weight in all."""

    name = "fp16"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__(batched_kernel(weight, bias), weight.shape[0], bias)
        self.bits, self.q = 16, weight.to(torch.float16).contiguous()


class Float32DecodeKernel(DecodeKernel):
    """Float32 weights, one plain copy: read in place by tenor's kernel for decode (F.linear at a
    few rows ran at under half the memory's speed on an AVX2 EPYC; with the fused Llama step,
    one stream ran 2x oneDNN's packed path on an AVX-512 EPYC), and for big batches through
    oneDNN where it pays (`onednn_applies`), else F.linear."""

    name = "dense"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        batched = OneDnnKernel(weight, bias) if onednn_applies(weight) else DenseKernel(weight, bias)
        super().__init__(batched, weight.shape[0], bias)
        self.bits, self.q = 32, weight

    def nbytes(self) -> int:
        return self.batched.nbytes()  # q is the batched kernel's own weight


class Int8WeightOnlyKernel(LinearKernel):
    name = "int8"

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        weight = weight.to(torch.int8).contiguous()
        if weight.data_ptr() % 64:  # the fused int8 kernel crashes on unaligned (e.g. mmapped) data
            weight = weight.clone()
        self.weight, self.scale, self.bias = weight, scale, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.bfloat16, torch.float32) and x.device.type == "cpu":
            flat = x.reshape(-1, x.shape[-1])
            out = torch.ops.aten._weight_int8pack_mm(flat, self.weight, self.scale.to(x.dtype))
            out = out.reshape(*x.shape[:-1], self.weight.shape[0])
        else:
            out = F.linear(x, self.weight.to(x.dtype)) * self.scale
        return out if self.bias is None else out + self.bias

    def nbytes(self) -> int:
        return _nbytes(self.weight, self.scale, self.bias)


def onednn_applies(weight: torch.Tensor) -> bool:
    """Whether oneDNN's linear runs and pays for `weight` here: a bf16/fp32 CPU tensor, a torch
    with oneDNN, a CPU with AVX-512."""
    if weight.device.type != "cpu" or weight.dtype not in (torch.bfloat16, torch.float32):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    return torch.backends.cpu.get_cpu_capability() in ("AVX512", "AVX512_BF16", "AMX")


def onednn_pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight in oneDNN's blocked layout, or None where that path does not apply."""
    if not onednn_applies(weight):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, 1)  # 1: laid out for decode-sized batches
    except (AttributeError, RuntimeError):
        return None


def make_kernel(
    weight: torch.Tensor | Blocks,
    dtype: torch.dtype,
    weight_format: str = "dense",
    scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> LinearKernel:
    """The kernel for `weight` [out, in] serving activations of `dtype` (a GGUF weight's blocks go
    to the integer kernels as they are, and are dequantized for any other)."""
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight format must be one of {', '.join(WEIGHT_FORMATS)}, got {weight_format!r}")
    bias = None if bias is None else bias.to(dtype).contiguous()
    if isinstance(weight, Blocks):
        if weight_format in ("int8", "int8a8") and dtype == torch.float32 and native.available():
            return Int8BlockKernel(weight, bias, int8_activations=weight_format == "int8a8")
        weight = weight.dequantize()
    if weight.device.type != "cpu" and scale is None:  # a GPU: torch's own GEMM (the rest is CPU code)
        if weight_format != "dense":
            raise ValueError(f"{weight_format} weights run on CPU kernels only, not on {weight.device}")
        return DenseKernel(weight.to(dtype).contiguous(), bias)
    if scale is not None:
        return Int8WeightOnlyKernel(weight, scale.to(dtype).contiguous(), bias)
    if weight_format in ("fp16", "int8", "int8a8"):
        if dtype != torch.float32:
            raise ValueError(f"{weight_format} weights need float32 activations, got {dtype}")
        with warnings.catch_warnings():  # FBGEMM's prepack warns about quantized tensors it does not use here
            warnings.simplefilter("ignore")
            if _native_fits(weight):
                if weight_format == "fp16":
                    return Fp16DecodeKernel(weight, bias)
                return Int8BlockKernel(weight, bias, int8_activations=weight_format == "int8a8")
            return Fp16Kernel(weight, bias)
    weight = weight.to(dtype).contiguous()
    if dtype == torch.float32 and weight.device.type == "cpu" and _native_fits(weight):
        return Float32DecodeKernel(weight, bias)
    packed = onednn_pack(weight)
    return DenseKernel(weight, bias) if packed is None else OneDnnKernel(packed, bias)


def _native_fits(weight: torch.Tensor) -> bool:
    return weight.shape[1] % native.INT8_BLOCK == 0 and native.available()

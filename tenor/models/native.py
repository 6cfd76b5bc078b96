"""tenor's fused float32 CPU kernels (tenor/csrc/*.c), built for this host into one library and
called through ctypes, with torch's ops as the fallback everywhere they are not available.

The library is compiled with the system C compiler for the host's own instruction sets
(`-march=native`) into a cache keyed by the source, the flags and the CPU's flags: a machine
whose CPU changes gets a fresh build, never a binary with instructions it lacks. `./setup.sh`
builds it once; otherwise the first engine that wants it does (under a second). Set
TENOR_NATIVE_KERNELS=0 to use torch's ops only.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tenor.models.block_weights import Int8GemmWeights

log = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent.parent / "csrc"
SOURCES = tuple(sorted(CSRC.glob("*.c")))  # compiled together; the headers beside them go into the cache key
# 512-bit loops where the CPU has them: gcc tunes some AVX-512 CPUs (Sapphire Rapids) for 256-bit
# loops. When added, it also kept softmax and SiLU off a scalar exp (32 streams' decode attention
# 0.76x the time, in process 1.16-1.20x output tok/s on an AMX Xeon); since fast_expf inlines
# everywhere (kernels.h), the wider loops alone gave 1.00-1.04x there, attention 0.97x.
_WIDE_VECTORS = ("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()
FLAGS = ("-O3", "-march=native", *_WIDE_VECTORS, "-fopenmp", "-shared", "-fPIC", "-std=c99")
_I64, _F32, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_CType = type[ctypes._SimpleCData]
# tenor_paged_attention's, also declared by tests that build attention.c for another CPU
PAGED_ATTENTION_ARGTYPES: list[_CType] = [_PTR] * 5 + [_I64] + [_PTR] * 4 + [_I64] * 8 + [_F32, _I64, _I64]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tenor" / "kernels"


def _library_path(compiler: str) -> Path:
    from tenor.hardware import cpu_info

    key = hashlib.sha256()
    for path in sorted(CSRC.glob("*.[ch]")):
        key.update(path.name.encode())
        key.update(path.read_bytes())
    key.update(" ".join((compiler, *FLAGS)).encode())
    key.update(" ".join(sorted(cpu_info().flags)).encode())
    return cache_dir() / f"cpu_kernels-{key.hexdigest()[:16]}.so"


def build() -> Path:
    """Compiles the library for this host if the cache lacks it; returns its path. Raises
    RuntimeError when no compiler is found or the build fails."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler (gcc or cc) on PATH")
    target = _library_path(compiler)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        partial = Path(tmp) / target.name
        done = subprocess.run(
            [compiler, *FLAGS, "-o", str(partial), *map(str, SOURCES), "-lm"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"building {CSRC.name}/*.c failed: {done.stderr.strip()[-500:]}")
        os.replace(partial, target)  # atomic: a concurrent build never sees half a file
    return target


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernels, or None (disabled, or no compiler, or the build failed: logged once)."""
    if os.environ.get("TENOR_NATIVE_KERNELS", "1") == "0":
        return None
    try:
        return load(build())
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        log.warning("tenor's native CPU kernels are unavailable, using torch's ops: %s", exc)
        return None


def load(path: Path) -> ctypes.CDLL:
    """A build of tenor/csrc at `path`, its functions' signatures declared: library() loads tenor's
    own build; benchmarks/fused_step_ab.py another revision's, to time the two in turn."""
    lib = ctypes.CDLL(str(path))
    lib.tenor_rms_norm_f32.argtypes = [_PTR, _PTR, _PTR, _I64, _I64, _F32, _I64]
    lib.tenor_silu_mul_f32.argtypes = [_PTR, _PTR, _I64, _I64, _I64]
    lib.tenor_silu_mul_bf16.argtypes = [_PTR, _PTR, _I64, _I64, _I64]
    lib.tenor_argmax_logsumexp.argtypes = [_PTR, _I64, _I64, _PTR, _PTR, _I64]
    lib.tenor_paged_attention.argtypes = PAGED_ATTENTION_ARGTYPES
    lib.tenor_block_linear_f32.argtypes = [_PTR, _PTR, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _I64, _I64, _I64]
    lib.tenor_rotary_kv_write_f32.argtypes = [_PTR] * 8 + [_I64] * 7
    lib.tenor_llama_layers_f32.argtypes = [_PTR] * 3 + [_I64] + [_PTR] * 7 + [_I64] * 12 + [_F32, _I64, _I64, _PTR]
    lib.tenor_int8_gemm_f32.argtypes = [_PTR] * 2 + [_I64] + [_PTR] * 5 + [_I64] * 4
    lib.tenor_int8_gemm_simd.argtypes, lib.tenor_int8_gemm_simd.restype = [], _I64
    lib.tenor_int8_gemm_fixed_steps.argtypes, lib.tenor_int8_gemm_fixed_steps.restype = [], _I64
    lib.tenor_quantize_u8_blocks.argtypes = [_PTR, _I64, _PTR, _PTR, _PTR, _I64]
    lib.tenor_nibble_levels.argtypes, lib.tenor_nibble_levels.restype = [_PTR, _I64, _PTR, _PTR, _I64], _I64
    for fn in (
        lib.tenor_rms_norm_f32,
        lib.tenor_silu_mul_f32,
        lib.tenor_silu_mul_bf16,
        lib.tenor_argmax_logsumexp,
        lib.tenor_paged_attention,
        lib.tenor_block_linear_f32,
        lib.tenor_rotary_kv_write_f32,
        lib.tenor_llama_layers_f32,
        lib.tenor_int8_gemm_f32,
        lib.tenor_quantize_u8_blocks,
    ):
        fn.restype = None
    return lib


def available() -> bool:
    return library() is not None


def _built() -> ctypes.CDLL:
    lib = library()
    assert lib is not None, "callers check available() first"
    return lib


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


CACHE_DTYPES = (torch.float32, torch.bfloat16)  # what the kernels read and write K/V in (int8 aside)


def prompt_rows_pay() -> bool:
    """Whether prompt rows should attend through tenor's kernel rather than torch's flash kernel:
    where it has its register-blocked prompt tiles (AVX2 with FMA, AVX-512). With AVX-512 the
    per-row kernel before them ran 1.4-1.6x faster than torch on 186-400 token prompts (Zen 5), built
    for AVX2 0.8-1.0x; with the tiles, AVX2 code took 0.5-0.7x torch's time in prompt steps
    (benchmarks/RESULTS.md). Elsewhere (ARM) torch keeps that work."""
    from tenor.hardware import cpu_info

    flags = cpu_info().flags
    return "avx512f" in flags or ("avx2" in flags and "fma" in flags)


def kv_bits(cache: torch.Tensor, scales: torch.Tensor | None = None) -> int:
    """The kernels' name for a cache's element type: 32 (float32), 16 (bf16), or 8 (int8, which
    needs its float32 scales)."""
    if cache.dtype == torch.int8 and scales is not None and scales.dtype == torch.float32:
        return 8
    if cache.dtype not in CACHE_DTYPES:
        raise ValueError(f"tenor's kernels keep K/V in float32, bf16, or int8 with float32 scales, not {cache.dtype}")
    return 32 if cache.dtype == torch.float32 else 16


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, D] float32 contiguous -> RMSNorm(x) * weight."""
    out = torch.empty_like(x)
    _built().tenor_rms_norm_f32(_ptr(x), _ptr(weight), _ptr(out), x.shape[0], x.shape[1], eps, torch.get_num_threads())
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2F] float32 or bf16, contiguous -> silu(gate) * up [T, F] in the same dtype (bf16
    computed in float32 and rounded as torch rounds)."""
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inter, dtype=gate_up.dtype)
    kernel = _built().tenor_silu_mul_bf16 if gate_up.dtype == torch.bfloat16 else _built().tenor_silu_mul_f32
    kernel(_ptr(gate_up), _ptr(out), rows, inter, torch.get_num_threads())
    return out


def argmax_logsumexp(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] float32 contiguous -> (each row's first largest index [R] int64, its log-sum-exp
    [R] float32; nan for a row holding nan or +inf)."""
    rows, vocab = logits.shape
    if vocab >= 2**31:  # the kernel indexes a row in int32
        return logits.argmax(dim=-1), torch.logsumexp(logits, dim=-1)
    best, lse = torch.empty(rows, dtype=torch.int64), torch.empty(rows)
    _built().tenor_argmax_logsumexp(_ptr(logits), rows, vocab, _ptr(best), _ptr(lse), torch.get_num_threads())
    return best, lse


def rotary_kv_write(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> None:
    """In place: rotates the q and k heads of qkv [T, (H + 2K) * E] (Llama's rotate-half over whole
    heads; cos, sin [T, E] contiguous with the sign in sin) and writes k, v to the cache [K, S, E]:
    float32, bf16 (rounded to nearest even), or int8 in steps of each row's absmax / 127, the steps
    to k_scales, v_scales [K, S, 1] float32 (as PagedKVCache.write stores them)."""
    dim = k_cache.shape[2]
    _built().tenor_rotary_kv_write_f32(
        _ptr(qkv),
        _ptr(cos),
        _ptr(sin),
        _ptr(k_cache),
        _ptr(v_cache),
        _ptr(k_scales) if k_scales is not None else None,
        _ptr(v_scales) if v_scales is not None else None,
        _ptr(slots),
        qkv.shape[0],
        num_heads,
        num_kv_heads,
        dim,
        k_cache.shape[1],
        kv_bits(k_cache, k_scales),
        torch.get_num_threads(),
    )


class AttentionScratch:
    """The score buffer paged attention writes, one slice a thread, grown on demand."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0)

    def get(self, floats: int) -> torch.Tensor:
        if self.buffer.numel() < floats:
            self.buffer = torch.empty(floats)
        return self.buffer


# Consecutive rows that read the same blocks one token further each (a prompt's) attend together,
# up to this many, each cache row read and widened once for all of them.
ATTENTION_TILE = 16


def attention_scratch_floats(threads: int, tile: int, group: int, max_len: int) -> int:
    """The scores scratch tenor_paged_attention needs: for each thread, a tile's query vectors (tile
    rows x `group` query heads a kv head) rounded up to whole vectors of 16, times max_len."""
    return threads * -(-tile * group // 16) * 16 * max_len


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    table: torch.Tensor,
    lengths: torch.Tensor,
    block_size: int,
    max_len: int,
    scratch: AttentionScratch,
    k_scales: torch.Tensor | None = None,
    v_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [B, H, E]; k, v [K, slots, E] (one layer, contiguous; float32, bf16, or int8 with float32
    scales [K, slots, 1]); table [B, N] int64; lengths [B] int64 -> [B, H, E], each row (a decode
    token, or a prompt token with its causal length) attending to its first lengths[b] cached tokens."""
    batch, heads, dim = q.shape
    kv_heads, slots = k.shape[0], k.shape[1]
    q = q.contiguous()
    out = torch.empty_like(q)
    threads = torch.get_num_threads()
    buffer = scratch.get(attention_scratch_floats(threads, ATTENTION_TILE, heads // kv_heads, max_len))
    sizes = (batch, heads, kv_heads, dim, table.shape[1], block_size, slots, max_len)
    shape = (*sizes, dim**-0.5, ATTENTION_TILE, threads)
    if k_scales is not None and v_scales is not None:  # an int8 cache
        scales: tuple[int | None, int | None] = (_ptr(k_scales), _ptr(v_scales))
        bits = 8
    else:
        scales, bits = (None, None), kv_bits(k)
    _built().tenor_paged_attention(
        _ptr(q), _ptr(k), _ptr(v), *scales, bits, _ptr(table), _ptr(lengths), _ptr(out), _ptr(buffer), *shape
    )
    return out


INT8_BLOCK = 32  # weights per scale and minimum along the input dimension, as GGUF's Q4_1 / Q8_1
INT8_MAX_ROWS = 8  # DECODE_MAX_ROWS in tenor/csrc/cpu_kernels.c: the kernel keeps one accumulator per row
# From this many rows a decode step's linears take their integer GEMM form where they have one
# (DecodeKernel.decoding, tenor_llama_layers_f32's gemm_min_rows): past one row the decode kernel is
# bound by its int16 multiply-adds, 1.4-5x the GEMM's time at 2-8 rows on a Zen 4
# (benchmarks/decode_vs_gemm.py). One row, and a short prompt's rows, keep the decode kernel: its
# int16 x is the more exact (short prompts prefilled with int8 x took greedy agreement with HF from
# 8 to 5 of 10 prompts, benchmarks/accuracy.py), and a lone stream reads the weights from memory.
GEMM_MIN_ROWS = 2


def block_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bits: int,
    scales: torch.Tensor,
    offsets: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """x [R, IN] float32 contiguous, R <= INT8_MAX_ROWS; weight int8 [OUT, IN] (bits 8) or packed
    uint8 [OUT, IN / 2] (bits 4) -> [R, OUT]. x is quantized to int16 per block of 32 inside the
    kernel (see tenor_block_linear_f32)."""
    rows, out_features = x.shape[0], weight.shape[0]
    if rows > INT8_MAX_ROWS:  # the kernel keeps each row's sums on its stack
        raise ValueError(f"block_linear takes up to {INT8_MAX_ROWS} rows, got {rows}")
    out = torch.empty(rows, out_features)
    _built().tenor_block_linear_f32(
        _ptr(x),
        _ptr(weight),
        bits,
        _ptr(scales),
        _ptr(offsets),
        None if bias is None else _ptr(bias),
        _ptr(out),
        rows,
        x.shape[1],
        out_features,
        torch.get_num_threads(),
    )
    return out


def int8_gemm_simd() -> bool:
    """Whether the built library has int8_gemm's vector path (AVX2): where it lacks it, int8_gemm
    runs its portable form, slower than torch's GEMMs."""
    return int8_gemm_width() > 0


def int8_gemm_width() -> int:
    """The bits of int8_gemm's vector path in the built library: 512 (AVX-512 with VNNI, two tiles
    a register), 256 (AVX2), 0 (none: not built, or built without AVX2)."""
    return int(_built().tenor_int8_gemm_simd()) if available() else 0


@functools.cache  # asked on every int8_gemm call; the built library does not change
def int8_gemm_fixed_steps() -> bool:
    """Whether the built library reads 4-bit weights' steps in 16-bit fixed point (AVX2 without VNNI):
    int8_gemm_pack(fixed_steps=...) must lay them out as it reads them."""
    return bool(_built().tenor_int8_gemm_fixed_steps()) if available() else False


def int8_gemm(x: torch.Tensor, weights: Int8GemmWeights, bias: torch.Tensor | None) -> torch.Tensor:
    """x [R, IN] float32 contiguous -> x @ W.T (+ bias) [R, OUT], x quantized per block of 32 inside
    the kernel: to int8 for 4-bit weights, to int16 for 8-bit ones."""
    if weights.bits == 4 and weights.fixed_steps != int8_gemm_fixed_steps():
        raise ValueError(f"4-bit weights packed with fixed_steps={weights.fixed_steps}: not the form this build reads")
    rows, in_features = x.shape
    out = torch.empty(rows, weights.out_features)
    x_bytes = rows * in_features * weights.bits // 4
    scratch = torch.empty(x_bytes + 8 * rows * (in_features // INT8_BLOCK), dtype=torch.uint8)
    _built().tenor_int8_gemm_f32(
        _ptr(x),
        _ptr(weights.levels),
        weights.bits,
        _ptr(weights.steps),
        _ptr(weights.offsets),
        None if bias is None else _ptr(bias),
        _ptr(out),
        _ptr(scratch),
        rows,
        in_features,
        weights.out_features,
        torch.get_num_threads(),
    )
    return out


# What llama_layers' op_seconds times, in tenor_llama_layers_f32's order (each summed over the layers).
FUSED_OPS = (
    *("rms_norm", "qkv", "rotary_kv_write", "q_copy", "attention"),
    *("o", "residual_add", "gate_up", "silu_mul", "down"),
)


def llama_layers(
    x: torch.Tensor,
    layer_weights: torch.Tensor,
    kv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    slots: torch.Tensor,
    table: torch.Tensor,
    lengths: torch.Tensor,
    scratch: AttentionScratch,
    num_heads: int,
    intermediate_size: int,
    block_size: int,
    max_len: int,
    tile: int,
    eps: float,
    kv_scales: torch.Tensor | None = None,
    gemm_min_rows: int = INT8_MAX_ROWS + 1,
    op_seconds: torch.Tensor | None = None,
) -> None:
    """Every Llama layer of a step in one call, x [R, D] float32 in place: up to INT8_MAX_ROWS rows
    on the decode kernel, more on the integer GEMM, and from `gemm_min_rows` rows each linear that
    has its integer GEMM form (GEMM_MIN_ROWS for a decode step's rows). layer_weights [L, 34]
    int64: each layer's weight pointers and bits (see tenor_llama_layers_f32); kv the whole cache
    [L, 2, K, slots, E], float32, bf16, or int8 with float32 kv_scales [L, 2, K, slots, 1]; table,
    lengths, tile: each row's blocks and context length, and the prompt tile, as paged_attention
    takes them (tile 1 for a decode step). Given op_seconds (float64 [len(FUSED_OPS)]), each kind of
    op's wall time over the layers is added to it."""
    wanted = (len(FUSED_OPS),)
    if op_seconds is not None and (
        op_seconds.dtype != torch.float64 or tuple(op_seconds.shape) != wanted or not op_seconds.is_contiguous()
    ):
        got = f"{op_seconds.dtype} {list(op_seconds.shape)}"
        raise ValueError(f"op_seconds must be contiguous float64 {list(wanted)}, got {got}")
    rows, dim = x.shape
    num_layers, _, kv_heads, num_slots, head_dim = kv.shape
    threads = torch.get_num_threads()
    scores = scratch.get(attention_scratch_floats(threads, tile, num_heads // kv_heads, max_len))
    _built().tenor_llama_layers_f32(
        _ptr(x),
        _ptr(layer_weights),
        _ptr(kv),
        kv_bits(kv, kv_scales),
        _ptr(kv_scales) if kv_scales is not None else None,
        _ptr(cos),
        _ptr(sin),
        _ptr(slots),
        _ptr(table),
        _ptr(lengths),
        _ptr(scores),
        rows,
        num_layers,
        dim,
        num_heads,
        kv_heads,
        head_dim,
        intermediate_size,
        table.shape[1],
        block_size,
        num_slots,
        max_len,
        tile,
        eps,
        threads,
        gemm_min_rows,
        None if op_seconds is None else _ptr(op_seconds),
    )

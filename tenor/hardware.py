"""What this CPU can do, read once, and the precision tenor serves with on it.

`--dtype auto` and `--quantize auto` (the defaults) resolve here. The rule, from measurements on
the CPUs we meet (benchmarks/RESULTS.md):

- bfloat16 activations and weights where the CPU has bf16 matrix units (AMX on x86, the BF16
  extension on ARM). Elsewhere float32 activations: bf16 is emulated and about 10x slower than
  float32 without native bf16, and with AVX512-BF16 but no AMX a bf16 model ran one stream at
  under half the speed of float32 with tenor's decode kernels (an AVX512-BF16 EPYC, RESULTS.md).
- With float32 activations on x86 (FBGEMM available), weights are kept as 8-bit blocks for
  decode steps (tenor's own kernel, tenor/csrc; a GGUF Q4_1 or Q8_0 block is held exactly) and
  with a 2-byte copy for prefill and many streams: bf16 through oneDNN where the CPU computes
  bf16 natively (AVX512-BF16: ~2x FBGEMM at 64-256 rows), else float16 (FBGEMM's fp16 GEMM);
  without a C compiler, float16 alone. On AVX2 CPUs without AVX-512, and on AVX-512 ones with VNNI
  but no bf16 (Cascade Lake, Ice Lake), the blocks themselves serve those batches instead, through
  tenor's integer GEMM with activations in int16 per block of 32 (as exact as FBGEMM's fp16,
  1.0-1.4x its speed and 1.3-3x on the LM head, fewer bytes). There, and on AVX512-BF16 CPUs
  without AMX (Zen 4, Zen 5), `auto` takes int8 activations against 4-bit weights (`int8a8`,
  llama.cpp's numerics: ~1.4-2.5x FBGEMM, 1.2-1.3x the int16 ones at 32 streams, 1.15-1.75x
  oneDNN's bf16 on a Zen 5; 96.9-97.5 % prefill top-1 on the default model, `integer_gemm_serves`);
  `--quantize int8` keeps int16 ones or bf16 (98-100 %).
  Accuracy against HF transformers in float32 on the default model: benchmarks/accuracy.py,
  figures in RESULTS.md.

On a CUDA device (`--device cuda`, or `auto` where torch sees one) activations are bfloat16 and
weights dense: GPUs compute bf16 natively, and the int8/fp16 weight kernels above are CPU code.

Thread count follows the cores this process may run on (affinity mask and cgroup quota), not
the host's core count.
"""

from __future__ import annotations

import functools
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

DTYPE_CHOICES = ("auto", "bfloat16", "float32")
QUANTIZE_CHOICES = ("auto", "none", "fp16", "int8", "int8a8")
CPU_KERNEL_WEIGHTS = ("fp16", "int8", "int8a8")  # the --quantize values that run on tenor's CPU kernels
DEVICE_CHOICES = ("auto", "cpu", "cuda")
WEIGHT_LABELS = {
    "dense": "weights in the activation dtype",
    "fp16": "float16 weights, read in place by tenor's kernel for decode, bf16 (oneDNN) or FBGEMM's fp16 for prefill",
    "int8": "int8 weights in blocks of 32 for decode (tenor's kernel), bf16 (oneDNN) or float16 (FBGEMM) for prefill "
    "(CPUs without native bf16: the blocks through tenor's integer GEMM, activations in int16)",
    "int8a8": "int8 weights as for int8, and 4-bit ones against int8 activations for big batches on x86 CPUs "
    "without AMX (llama.cpp's numerics: faster, less exact)",
}


@dataclass(frozen=True)
class CpuInfo:
    model_name: str
    machine: str  # platform.machine(): x86_64, aarch64, ...
    flags: frozenset[str]  # /proc/cpuinfo flags (x86) or Features (ARM)
    torch_capability: str  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...
    usable_cores: int

    @property
    def native_bf16(self) -> bool:
        return bool({"amx_bf16", "avx512_bf16", "bf16"} & self.flags)

    @property
    def isa(self) -> str:
        """The widest vector/matrix extensions, as users name them."""
        named = [
            ("amx_tile", "AMX"),
            ("avx512_bf16", "AVX512-BF16"),
            ("avx512_vnni", "AVX512-VNNI"),
            ("avx512f", "AVX-512"),
            ("avx_vnni", "AVX-VNNI"),
            ("avx2", "AVX2"),
            ("fma", "FMA"),
            ("sve", "SVE"),
            ("asimd", "NEON"),
            ("bf16", "BF16"),
        ]
        found = [label for flag, label in named if flag in self.flags]
        return " ".join(found) or self.torch_capability


@dataclass(frozen=True)
class Precision:
    """What the engine runs: activation dtype, how linear weights are stored, and why."""

    dtype: str  # "bfloat16" | "float32": activations, norms, and the KV cache unless kv_dtype
    weights: str  # a key of WEIGHT_LABELS
    reason: str
    device: str = "cpu"  # "cpu" | "cuda": where weights, KV cache and every step live

    @property
    def kv_dtype(self) -> str | None:
        """K/V storage when narrower than `dtype`: bf16 beside int8 weights, where attention's K/V
        reads are the next biggest stream of bytes at many streams (issue 8: as accurate, 10 of 10
        greedy prompts as float32 HF's, 100 % top-1); else None, the activation dtype."""
        return "bfloat16" if self.weights in ("int8", "int8a8") else None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo_fields(text: str) -> tuple[str, frozenset[str]]:
    name, flags = "", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return name, flags


def usable_cores(affinity: int | None = None, cgroup_cpu_max: str | None = None) -> int:
    """Cores this process may use: its affinity mask, capped by a cgroup v2 CPU quota."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cgroup_cpu_max is None:
        cgroup_cpu_max = _read("/sys/fs/cgroup/cpu.max")
    quota, _, period = cgroup_cpu_max.strip().partition(" ")
    if quota and quota != "max" and period:
        try:
            affinity = min(affinity, max(1, math.ceil(int(quota) / int(period))))
        except ValueError:
            pass
    return max(1, affinity)


@functools.cache
def cpu_info() -> CpuInfo:
    import torch

    name, flags = _cpuinfo_fields(_read("/proc/cpuinfo"))
    return CpuInfo(
        model_name=name or platform.processor() or "unknown CPU",
        machine=platform.machine(),
        flags=flags,
        torch_capability=torch.backends.cpu.get_cpu_capability(),
        usable_cores=usable_cores(),
    )


@functools.cache
def fbgemm_fp16_available() -> bool:
    """FBGEMM's fp16-weight GEMM works in this torch on this CPU (x86 builds)."""
    import torch

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        packed = torch.ops.quantized.linear_prepack_fp16(torch.ones(8, 8), None)
        out = torch.ops.quantized.linear_dynamic_fp16(torch.ones(2, 8), packed)
    except (RuntimeError, AttributeError):
        return False
    return bool(torch.all(out == 8))


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_device(name: str, has_cuda: bool | None = None) -> str:
    """--device: "auto" is cuda where torch sees a CUDA device, else cpu; ValueError for cuda
    on a machine without one (or a torch built without CUDA)."""
    if name not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {', '.join(DEVICE_CHOICES)}, got {name!r}")
    if name == "cpu":
        return name  # without importing torch: a CPU model server asks nothing of it
    if has_cuda is None:
        has_cuda = cuda_available()
    if name == "auto":
        return "cuda" if has_cuda else "cpu"
    if name == "cuda" and not has_cuda:
        raise ValueError(
            "torch sees no CUDA device here (no GPU, no driver, or a CPU build of torch: "
            "install the CUDA build with TENOR_TORCH=cuda ./setup.sh)"
        )
    return name


def integer_gemm_serves(cpu: CpuInfo, simd_width: int, int8_activations: bool = False) -> bool:
    """Whether tenor's integer GEMM (tenor/csrc/int8_gemm.c, built `simd_width` bits wide: 0, 256
    or 512) serves block weights' big batches on `cpu`, for `--quantize int8` or, with
    `int8_activations`, `--quantize int8a8` (benchmarks/RESULTS.md, `benchmarks/batch_gemm.py`):
    - CPUs without native bf16: where its vector path beats FBGEMM's fp16 GEMM: any on AVX2 CPUs
      without AVX-512 (both 256 bits wide), on AVX-512 CPUs only the 512-bit VNNI one (without
      VNNI FBGEMM's 512-bit FMAs are ahead);
    - AVX512-BF16 CPUs without AMX (Zen 4, Zen 5): for int8a8 only. Its int8 x against 4-bit
      levels does twice the multiply-adds of oneDNN's bf16 instruction (Zen 5: 1.15-1.75x the
      speed), and int16 x against 8-bit levels (the LM head) is as fast as bf16 and more exact;
      int16 x against 4-bit levels (`int8`) is slower, so bf16 keeps those;
    - AMX CPUs: never (AMX's bf16 tiles are far ahead)."""
    if "avx2" not in cpu.flags or "amx_bf16" in cpu.flags:
        return False
    if cpu.native_bf16:
        return int8_activations and simd_width >= 512
    return simd_width >= (512 if "avx512f" in cpu.flags else 256)


def choose_precision(
    dtype: str,
    quantize: str,
    cpu: CpuInfo,
    fp16_kernel: bool,
    native_kernels: bool = False,
    device: str = "cpu",
    integer_gemm: bool = False,
) -> Precision:
    """Resolves --dtype and --quantize ("auto" or explicit) for `cpu` (or a CUDA `device`), given
    whether FBGEMM's fp16 GEMM, tenor's native kernels and its integer GEMM (`integer_gemm_serves`)
    work here; raises ValueError for a combination that cannot run here."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {dtype!r}")
    if quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {quantize!r}")
    if device == "cuda":
        return _cuda_precision(dtype, quantize)
    if dtype == "auto":
        # tenor's float32 decode kernels (where they run) beat a bf16 model, with AMX too
        # (served on an AMX Xeon: 1.38x the tok/s at 1 stream, 1.36x at 32 streams).
        decode_kernels = fp16_kernel and native_kernels
        if cpu.native_bf16 and not decode_kernels:
            dtype, why = "bfloat16", f"{cpu.isa} computes bf16 natively"
        elif cpu.native_bf16:
            batches = "int8 (VNNI)" if integer_gemm and quantize in ("auto", "int8a8") else "native bf16"
            dtype, why = "float32", f"{cpu.isa}: float32 decode kernels, big batches in {batches}"
        else:
            dtype, why = "float32", "no native bf16 on this CPU (it would be emulated, ~10x slower)"
    else:
        why = f"dtype {dtype} set by the model config or --dtype"
    if quantize in CPU_KERNEL_WEIGHTS:
        if dtype != "float32":
            raise ValueError(
                f"quantize {quantize} needs float32 activations (--dtype float32, or auto on a CPU without native bf16)"
            )
        if not fp16_kernel:
            raise ValueError(f"quantize {quantize} needs FBGEMM (an x86 build of torch); use --quantize none")
        if quantize in ("int8", "int8a8") and not native_kernels:
            raise ValueError(f"quantize {quantize} needs tenor's native kernels (a C compiler at setup); use fp16")
        return Precision(dtype, quantize, f"{why}; {quantize} weights set by the config or --quantize")
    if quantize == "auto" and dtype == "float32" and fp16_kernel:
        if native_kernels and integer_gemm:
            return Precision(
                dtype,
                "int8a8",
                f"{why}; int8 weights read a quarter of float32's bytes per decode step, and big batches' 4-bit "
                "weights meet int8 activations (llama.cpp's numerics; --quantize int8 for the exact path)",
            )
        if native_kernels:
            return Precision(dtype, "int8", f"{why}; int8 weights read a quarter of float32's bytes per decode step")
        return Precision(dtype, "fp16", f"{why}; fp16 weights halve the bytes each step reads")
    return Precision(dtype, "dense", why)


def device_name(device: str) -> str:
    """ "cpu", or the GPU's own name (as `nvidia-smi` shows it) for cuda."""
    if device != "cuda":
        return device
    import torch

    return f"cuda:{torch.cuda.current_device()} {torch.cuda.get_device_name()}"


def check_device_room(device: str, kv_cache_bytes: int) -> None:
    """ValueError when a GPU has not the free memory for the KV cache (on the CPU the budget is
    capped by default and set by the user: nothing to ask)."""
    if device != "cuda":
        return
    import torch

    free, total = torch.cuda.mem_get_info()
    if kv_cache_bytes > free:
        raise ValueError(
            f"the KV cache ({kv_cache_bytes / 2**30:.2f} GiB) does not fit the GPU's free memory "
            f"({free / 2**30:.2f} of {total / 2**30:.2f} GiB); lower --kv-cache-gb"
        )


def _cuda_precision(dtype: str, quantize: str) -> Precision:
    if quantize in CPU_KERNEL_WEIGHTS:
        raise ValueError(f"quantize {quantize} runs on CPU kernels only; use --quantize none (or auto) on cuda")
    if dtype == "auto":
        return Precision("bfloat16", "dense", "the GPU computes bf16 natively", "cuda")
    return Precision(dtype, "dense", f"dtype {dtype} set by the model config or --dtype", "cuda")


def resolve_precision(dtype: str, quantize: str, device: str = "cpu") -> Precision:
    """choose_precision for this machine, on `device` (already resolved: cpu or cuda)."""
    from tenor.models import native

    cpu = cpu_info()
    integer_gemm = integer_gemm_serves(cpu, native.int8_gemm_width(), int8_activations=True)
    return choose_precision(dtype, quantize, cpu, fbgemm_fp16_available(), native.available(), device, integer_gemm)


def configure_threads() -> int:
    """Sets torch's intra-op threads to the cores this process may use, unless the user (or a
    launcher splitting cores between ranks) set OMP_NUM_THREADS; returns the count."""
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    cores = cpu_info().usable_cores
    if torch.get_num_threads() != cores:
        torch.set_num_threads(cores)
    return cores

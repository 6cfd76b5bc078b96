"""The GEMMs behind big batches (prefill, many streams) on this CPU, float32 in and out:
FBGEMM's fp16-weight GEMM against oneDNN in bf16 (packed weight) and tenor's integer GEMM for
block weights (tenor/csrc/int8_gemm.c: 4-bit levels against int16 x, the default on AVX2-only
CPUs, and against int8 x, `--quantize int8a8`), for the default model's linear shapes. Which one
wins decides `tenor.models.kernels.batched_kernel` and `int8_gemm_applies`.

    python benchmarks/batch_gemm.py [--rows 16,64,256] [--repeats 20] [--as-cpu avx2|avx512]

oneDNN bf16 is skipped where this torch or CPU lacks it; on CPUs without native bf16 it is
emulated and slow, which is the point of measuring it. The int8 GEMM is skipped where tenor's
kernels are not built with its vector path (AVX2). --as-cpu: the code an AVX2-only (avx2) or
Cascade Lake (avx512) CPU runs (benchmarks/cpu_proxy.py); --as-avx2 is --as-cpu avx2.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tenor.models import block_weights, native  # noqa: E402

# (out, in) of SmolLM2-135M's linears: qkv, o, gate_up, down, LM head
SHAPES = [(1728, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]


def median_ms(fn, repeats: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="16,64,256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--as-cpu", choices=("avx2", "avx512"), help="run the code such a CPU runs, through benchmarks/cpu_proxy.py"
    )
    parser.add_argument("--as-avx2", dest="as_cpu", action="store_const", const="avx2", help="--as-cpu avx2")
    args = parser.parse_args()
    if args.as_cpu:
        from benchmarks.cpu_proxy import narrow_to

        narrow_to(args.as_cpu)
    from tenor.hardware import configure_threads, cpu_info

    threads = configure_threads()
    cpu = cpu_info()
    print(f"CPU {cpu.model_name} ({cpu.isa}), {threads} threads")
    print("| shape | rows | FBGEMM fp16 ms | oneDNN bf16 ms | fp16 / bf16 | int16 x / int8 x ms | fp16 / each |")
    print("|---|---|---|---|---|---|---|")
    warnings.simplefilter("ignore")  # FBGEMM's prepack warns about quantized tensors it does not use
    for out_features, in_features in SHAPES:
        weight = torch.randn(out_features, in_features) * 0.05
        fp16 = torch.ops.quantized.linear_prepack_fp16(weight, None)
        try:
            bf16 = torch.ops.mkldnn._reorder_linear_weight(weight.bfloat16(), 1)
        except (AttributeError, RuntimeError):
            bf16 = None
        levels = torch.randint(0, 16, (out_features, in_features), dtype=torch.uint8)
        steps = torch.rand(out_features, in_features // 32) * 0.01
        integer = []
        if native.int8_gemm_simd():  # the same weights as int8 levels (int16 x) and as 0..15 (int8 x)
            integer = [block_weights.int8_gemm_pack(levels.to(torch.int8) - 8, steps, 0 * steps)]
            integer.append(block_weights.int8_gemm_pack(levels, steps, -8 * steps, native.int8_gemm_fixed_steps()))
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, in_features)
            a = median_ms(lambda: torch.ops.quantized.linear_dynamic_fp16(x, fp16), args.repeats)
            row = f"| {out_features}x{in_features} | {rows} | {a:.3f} |"
            if bf16 is None:
                row += " - | - |"
            else:
                b = median_ms(
                    lambda: torch.ops.mkldnn._linear_pointwise(x.bfloat16(), bf16, None, "none", [], "").float(),
                    args.repeats,
                )
                row += f" {b:.3f} | {a / b:.2f}x |"
            if not integer:
                row += " - | - |"
            else:
                c = [median_ms(lambda w=w: native.int8_gemm(x, w, None), args.repeats) for w in integer]
                row += f" {c[0]:.3f} / {c[1]:.3f} | {a / c[0]:.2f}x / {a / c[1]:.2f}x |"
            print(row)


if __name__ == "__main__":
    main()

"""The decode kernel against the integer GEMM on the default model's own block linears, at a few
rows: where `DecodeKernel.decoding` hands a decode step's rows from one to the other (native.GEMM_MIN_ROWS).
Both kernels are called in turn on the same x, each linear's weights hot in cache (one layer's
linears and the LM head, as loaded for serving); prints each side's median time, their ratio and
the largest difference between their outputs relative to the output's largest value (int8 x
against 4-bit levels under int8a8, int16 x against 8-bit ones: the GEMM's numbers, not the decode
kernel's).

    python benchmarks/decode_vs_gemm.py [--rows 1,2,3,4,8] [--repeats 60] [--as-cpu avx2|avx512]
                                        [--quantize int8]   # as `tenor serve --quantize` (default auto)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.cpu_proxy import narrow_to  # noqa: E402


def _median_us(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,2,3,4,8", help="comma list, each 1..8")
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--quantize", default="auto", help="as `tenor serve --quantize`")
    parser.add_argument("--as-cpu", choices=("avx2", "avx512"), help="run the code such a CPU runs (cpu_proxy.py)")
    args = parser.parse_args(argv)
    if args.as_cpu:
        narrow_to(args.as_cpu)
    from tenor import registry
    from tenor.engine.model_loader import load_model
    from tenor.hardware import cpu_info
    from tenor.models import native
    from tenor.models.block_weights import Int8GemmWeights
    from tenor.models.kernels import DecodeKernel, Int8GemmKernel
    from tenor.models.layers import ParallelLinear
    from tenor.models.llama import LlamaBlock, LlamaModel

    rows_list = [int(r) for r in args.rows.split(",")]
    if not all(1 <= r <= native.INT8_MAX_ROWS for r in rows_list):
        parser.error(f"--rows takes rows from 1 to {native.INT8_MAX_ROWS} (the decode kernel's), got {args.rows}")

    servable = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(quantize=args.quantize)
    model = load_model(servable, None).model
    assert isinstance(model, LlamaModel)
    layer = model.layers[0]
    assert isinstance(layer, LlamaBlock)
    linears: dict[str, ParallelLinear] = {
        "qkv": layer.qkv,
        "o": layer.o,
        "gate_up": layer.gate_up,
        "down": layer.down,
        "lm_head": model.lm_head,
    }
    print(f"CPU {cpu_info().model_name} ({cpu_info().isa}), {torch.get_num_threads()} threads")
    for name, linear in linears.items():
        kernel = linear.kernel
        if not isinstance(kernel, DecodeKernel) or not isinstance(kernel.batched, Int8GemmKernel):
            print(f"{name}: no integer GEMM form here ({type(kernel).__name__})")
            continue
        gemm = kernel.batched.weights
        for rows in rows_list:
            x = torch.randn(rows, linear.in_features)

            def decode(x: torch.Tensor = x, kernel: DecodeKernel = kernel) -> torch.Tensor:
                return native.block_linear(x, kernel.q, kernel.bits, kernel.scales, kernel.offsets, None)

            def integer_gemm(x: torch.Tensor = x, gemm: Int8GemmWeights = gemm) -> torch.Tensor:
                return native.int8_gemm(x, gemm, None)

            decode_out, gemm_out = decode(), integer_gemm()
            decode_us, gemm_us = _median_us(decode, args.repeats), _median_us(integer_gemm, args.repeats)
            difference = ((decode_out - gemm_out).abs().max() / decode_out.abs().max()).item()
            print(
                f"{name} {linear.out_features}x{linear.in_features} bits {kernel.bits} rows {rows}: decode "
                f"{decode_us:.0f} us, gemm {gemm_us:.0f} us, gemm/decode {gemm_us / decode_us:.2f}, "
                f"largest difference {difference:.1e}"
            )


if __name__ == "__main__":
    main()

"""Where a serving engine step's time goes, in process (no HTTP): a closed loop of C streams over
the benchmark's prompt set through the default model, then the mean time per step of each part
(linears, the LM head, attention, norms, rotary + KV write, SiLU; where the step runs fused, every
layer at once and each kind of op within it, "fused ...") for pure decode steps of at least C - 2
rows and for steps that carry prompt chunks. It starts once the KV cache's pages are faulted in,
as a served benchmark does.

    python benchmarks/step_profile.py [--concurrency 32] [--prompts 64] [--max-tokens 128]
                                      [--as-cpu avx2|avx512]

--as-cpu runs the code an AVX2-only (avx2) or Cascade Lake (avx512) CPU would on this one (see
benchmarks/cpu_proxy.py); --as-avx2 is --as-cpu avx2.

The parts are timed by wrapping the model's Python-level calls, so each figure includes the
dispatch around its kernel; their sum falls short of the step by the glue between them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tenor.models.layers as layers  # noqa: E402
import tenor.models.llama as llama  # noqa: E402
from benchmarks.cpu_proxy import narrow_to  # noqa: E402
from tenor import hugepages, registry  # noqa: E402
from tenor.bench.metrics import percentile  # noqa: E402
from tenor.bench.prompts import make_prompts  # noqa: E402
from tenor.engine.api import GenerateRequest, SamplingParams  # noqa: E402
from tenor.engine.factory import EngineOptions  # noqa: E402
from tenor.engine.llm_engine import LLMEngine  # noqa: E402

PARTS: collections.defaultdict[str, float] = collections.defaultdict(float)


def _timed(module: object, name: str, label: str) -> None:
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            PARTS[label] += time.perf_counter() - start

    setattr(module, name, wrapper)


def _instrument() -> None:
    _timed(llama, "rms_norm", "rms_norm")
    _timed(llama, "silu_mul", "silu_mul")
    _timed(llama, "paged_attention", "attention")
    _timed(llama.native, "rotary_kv_write", "rotary_kv_write")
    _timed_fused_layers()
    for name in ("forward", "forward_bf16"):  # the float32 and the bf16-out entry of every linear
        _timed_linear(name)


def _timed_fused_layers() -> None:
    """A fused step's layers (one call, where the step fuses) and, within it, each kind of op."""
    inner = llama.native.llama_layers

    def fused(*args, **kwargs):
        op_seconds = torch.zeros(len(llama.native.FUSED_OPS), dtype=torch.float64)
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs, op_seconds=op_seconds)
        finally:
            PARTS["fused_layers"] += time.perf_counter() - start
            for name, seconds in zip(llama.native.FUSED_OPS, op_seconds.tolist()):
                PARTS[f"fused {name}"] += seconds

    llama.native.llama_layers = fused


def _timed_linear(name: str) -> None:
    forward = getattr(layers.ParallelLinear, name)

    def linear(self, x, *args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(self, x, *args, **kwargs)
        finally:
            PARTS["lm_head" if self.out_features > 10000 else "linear"] += time.perf_counter() - start

    setattr(layers.ParallelLinear, name, linear)


async def _run(args: argparse.Namespace) -> None:
    servable = dataclasses.replace(
        registry.get("llama.SmolLM2_135M_Instruct"), dtype=args.dtype, quantize=args.quantize
    )
    engine = LLMEngine(servable, None, EngineOptions(max_num_batched_tokens=args.max_num_batched_tokens))
    await engine.start()
    # A served benchmark starts long after the KV cache's pages are faulted in (tenor/hugepages.py);
    # timed before that, the first writes to each page stall on the kernel's zeroing.
    hugepages.wait_for_background()
    print(engine.stats().runtime)
    prompts = [tuple(engine.tokenizer.encode(p)) for p in make_prompts(args.prompts)]
    steps: dict[str, list[float]] = collections.defaultdict(list)
    parts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    run = engine._runner.run

    def timed_run(plan):
        PARTS.clear()
        start = time.perf_counter()
        out = run(plan)
        elapsed = time.perf_counter() - start
        decodes = sum(1 for c in plan.chunks if c.is_decode)
        kind = "decode" if decodes == plan.num_tokens else "with prompts"
        steps[kind].append(elapsed)
        if kind != "decode" or decodes >= args.concurrency - 2:
            parts[kind].update({k: v for k, v in PARTS.items()} | {"step": elapsed, "steps": 1})
        return out

    engine._runner.run = timed_run  # type: ignore[method-assign]
    queue = list(enumerate(prompts))
    first_token: list[float] = []

    async def stream() -> None:
        while queue:
            i, ids = queue.pop(0)
            start, first = time.perf_counter(), None
            request = GenerateRequest(f"p{i}", ids, SamplingParams(max_tokens=args.max_tokens, ignore_eos=True))
            async for _ in engine.generate(request):
                first = first or time.perf_counter() - start
            first_token.append(first or 0.0)

    start = time.perf_counter()
    await asyncio.gather(*(stream() for _ in range(args.concurrency)))
    wall = time.perf_counter() - start
    await engine.stop()
    print(f"{len(prompts)} prompts, {sum(map(len, prompts))} prompt tokens, {args.concurrency} streams")
    print(
        f"wall {wall:.1f} s, {len(prompts) * args.max_tokens / wall:.1f} output tok/s, "
        f"TTFT p50 {statistics.median(first_token):.2f} s"
        f" (p10 {percentile(first_token, 10):.2f}, p90 {percentile(first_token, 90):.2f})"
    )
    for kind, times in steps.items():
        print(f"{kind}: {len(times)} steps, {sum(times):.1f} s, median {1000 * statistics.median(times):.1f} ms")
    for kind, counts in parts.items():
        n = counts.pop("steps")
        print(f"{kind}, ms a step ({n} steps): " + ", ".join(f"{k} {1000 * v / n:.1f}" for k, v in counts.items()))


def arguments(description: str | None = __doc__) -> argparse.ArgumentParser:
    """The flags; `description` heads --help (fused_step_ab.py, which runs this loop, passes its own)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=EngineOptions.max_num_batched_tokens, help="tokens a step"
    )
    parser.add_argument("--dtype", default="auto", help="as `tenor serve --dtype`")
    parser.add_argument("--quantize", default="auto", help="as `tenor serve --quantize`")
    parser.add_argument(
        "--as-cpu", choices=("avx2", "avx512"), help="run the code such a CPU runs, through benchmarks/cpu_proxy.py"
    )
    parser.add_argument("--as-avx2", dest="as_cpu", action="store_const", const="avx2", help="--as-cpu avx2")
    return parser


def run(args: argparse.Namespace) -> None:
    if args.as_cpu:
        narrow_to(args.as_cpu)
    _instrument()
    asyncio.run(_run(args))


def main() -> None:
    run(arguments().parse_args())


if __name__ == "__main__":
    main()

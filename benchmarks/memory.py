"""Peak memory of the engine at many long streams: does it stay within the configured KV
budget plus the weights?

    python benchmarks/memory.py [--streams 64] [--context 2048] [--kv-cache-gb 3.0] [--json-out F]

Each stream has a distinct random prompt of (context - new tokens) ids and generates
`--new-tokens` greedy tokens, all at once. Peak RSS is sampled every 50 ms; the baseline is
the process before the engine loads (Python, torch and tenor imported).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time

import psutil


class PeakRss:
    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def run(args: argparse.Namespace) -> dict:
    from tenor import registry
    from tenor.engine.api import GenerateRequest, SamplingParams
    from tenor.engine.factory import EngineOptions
    from tenor.engine.llm_engine import LLMEngine

    servable = registry.get("llama.SmolLM2_135M_Instruct")
    baseline = psutil.Process().memory_info().rss
    budget = int(args.kv_cache_gb * (1 << 30))
    engine = LLMEngine(servable, None, EngineOptions(kv_cache_bytes=budget, max_waiting=args.streams))
    with PeakRss() as rss:
        await engine.start()
        loaded = psutil.Process().memory_info().rss
        rng = random.Random(0)
        prompt_len = args.context - args.new_tokens

        async def stream(i: int) -> int:
            ids = tuple(rng.randrange(100, 49000) for _ in range(prompt_len))
            sampling = SamplingParams(max_tokens=args.new_tokens, ignore_eos=True)
            count = 0
            async for output in engine.generate(GenerateRequest(f"m{i}", ids, sampling)):
                count += sum(len(d.token_ids) for d in output.deltas)
            return count

        start = time.perf_counter()
        tokens = await asyncio.gather(*(stream(i) for i in range(args.streams)))
        elapsed = time.perf_counter() - start
        stats = engine.stats()
        await engine.stop()
    weights = servable.weight_bytes()
    return {
        "streams": args.streams,
        "context": args.context,
        "new_tokens_per_stream": args.new_tokens,
        "generated_tokens": sum(tokens),
        "seconds": elapsed,
        "preemptions": stats.num_preemptions,
        "kv_budget_bytes": budget,
        "kv_allocated_bytes": engine.kv_cache_bytes,
        "weight_bytes": weights,
        "baseline_rss_bytes": baseline,
        "rss_after_load_bytes": loaded,
        "peak_rss_bytes": rss.peak,
        "peak_over_baseline_bytes": rss.peak - baseline,
        "within_budget_plus_weights": rss.peak - baseline <= budget + weights,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--kv-cache-gb", type=float, default=3.0)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    gib = 1 << 30
    print(
        f"{report['streams']} streams x {report['context']} tokens: peak RSS "
        f"{report['peak_rss_bytes'] / gib:.2f} GiB, "
        f"{(report['peak_over_baseline_bytes']) / gib:.2f} GiB over the baseline; KV budget "
        f"{report['kv_budget_bytes'] / gib:.2f} GiB + weights {report['weight_bytes'] / gib:.2f} GiB; "
        f"within: {report['within_budget_plus_weights']}; preemptions {report['preemptions']}"
    )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()

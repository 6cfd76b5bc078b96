"""Model-server groups on this machine: the default model (float32) on 1 process vs a local group
of 2, with the same total cores. Peak RSS per rank, prefill and decode step times, and the share
of each step the leader spends in collectives (all-reduce + logits gather, incl. waiting for the
slower rank).

    python benchmarks/group.py [--out benchmarks/results/group-DATE.json]

Projects, on paper, 8 ranks of Llama 2 70B from the measured per-collective latency and the
bytes each step moves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

PROMPT_TOKENS = 128
DECODE_TOKENS = 32
KV_BYTES = 96 << 20


def vm_hwm_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _timed(engine, key: str, prompt: list[int], tokens: int) -> tuple[float, float]:
    from tenor.engine.api import GenerateRequest, SamplingParams

    start = time.perf_counter()
    first = None
    request = GenerateRequest(key, tuple(prompt), SamplingParams(max_tokens=tokens, ignore_eos=True))
    async for output in engine.generate(request):
        if first is None and output.deltas:
            first = time.perf_counter() - start
    return first or 0.0, time.perf_counter() - start


async def _measure(servable, leader) -> dict:
    from tenor.engine.factory import EngineOptions
    from tenor.engine.llm_engine import LLMEngine

    engine = LLMEngine(servable, None, EngineOptions(kv_cache_bytes=KV_BYTES, warmup=True, group=leader))
    await engine.start()
    group = leader.group if leader is not None else None

    def prompt(stream: int) -> list[int]:  # distinct from the first token on: no prefix-cache hits
        return [1] + [(7 * i + 1009 * stream) % 40000 + 100 for i in range(PROMPT_TOKENS - 1)]

    out: dict = {}
    try:
        for streams in (1, 8):
            before = (group.collective_s, group.collective_calls) if group else (0.0, 0)
            results = await asyncio.gather(
                *(_timed(engine, f"s{streams}-{i}", prompt(i + streams), DECODE_TOKENS) for i in range(streams))
            )
            ttft = max(r[0] for r in results)
            total = max(r[1] for r in results)
            decode_step = (total - ttft) / (DECODE_TOKENS - 1)
            row = {
                "prefill_s": round(ttft, 4),
                "decode_step_ms": round(decode_step * 1000, 2),
                "wall_s": round(total, 3),
            }
            if group:
                spent, calls = group.collective_s - before[0], group.collective_calls - before[1]
                row["collective_share"] = round(spent / total, 3)
                row["collective_calls"] = calls
                row["collective_us_each"] = round(spent / max(calls, 1) * 1e6, 1)
            out[f"streams_{streams}"] = row
    finally:
        await engine.stop()
    return out


def run(size: int) -> dict:
    from tenor import registry
    from tenor.dist.local import local_group

    servable = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(
        dtype="float32", quantize="none", max_batch_size=8, max_prefill_predict_length=512, max_target_length=1024
    )
    with local_group(servable, size) as local:
        figures = asyncio.run(_measure(servable, local.leader))
        figures["peak_rss_mb"] = [round(vm_hwm_mb(), 1)] + [round(vm_hwm_mb(p.pid), 1) for p in local.workers.processes]
    figures["weights_mb_per_rank"] = [round(weight_bytes(servable, size, r) / 2**20, 1) for r in range(size)]
    return figures


def weight_bytes(servable, size: int, rank: int) -> int:
    """What rank `rank`'s shard of the weights takes in float32 (a tied head counts twice: packed copy)."""
    import dataclasses

    from tenor.dist.shard_plan import local_config, plan_shard

    local = local_config(servable.model, plan_shard(servable.model, size, rank))
    return dataclasses.replace(servable, model=local).weight_bytes()


def projection(us_per_collective: float) -> dict:
    """Llama 2 70B on 8 ranks, bf16 activations: what each decode step must communicate."""
    from tenor.registry import LLAMA2_70B as c

    ranks, batch = 8, 32
    collectives = 2 * c.num_layers + 2  # o and down per layer, the embedding sum, the logits gather
    reduce_bytes = batch * c.hidden_size * 2  # one all-reduce's payload per rank
    ring_bytes = 2 * (ranks - 1) / ranks * reduce_bytes * 2 * c.num_layers
    return {
        "collectives_per_step": collectives,
        "allreduce_payload_bytes": reduce_bytes,
        "ring_bytes_per_rank_per_step": int(ring_bytes),
        "latency_floor_ms_at_measured_gloo_cost": round(collectives * us_per_collective / 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=f"benchmarks/results/group-{time.strftime('%Y-%m-%d')}.json")
    parser.add_argument("--only", type=int, choices=(1, 2), default=None)
    args = parser.parse_args()
    if args.only is not None:  # one configuration per process: each starts with a clean peak RSS
        print(json.dumps(run(args.only)))
        return 0
    import subprocess
    import sys

    results = {}
    for size in (1, 2):
        done = subprocess.run(
            [sys.executable, __file__, "--only", str(size)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
        )
        results[f"N={size}"] = json.loads(done.stdout.strip().splitlines()[-1])
    each = results["N=2"]["streams_1"]["collective_us_each"]
    results["projection_llama2_70b_8_ranks_batch_32"] = projection(each)
    results["cores"] = len(os.sched_getaffinity(0))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

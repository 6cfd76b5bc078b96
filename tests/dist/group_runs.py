"""Runs a servable through the real engine, in one process or as a local group of N processes
(this process rank 0, workers started as children), and returns each request's greedy tokens."""

from __future__ import annotations

import asyncio

from tenor.dist.local import local_group
from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.factory import EngineOptions
from tenor.engine.llm_engine import LLMEngine
from tenor.registry import ServableConfig

KV_BYTES = 64 << 20


async def _collect(engine: LLMEngine, key: str, ids: list[int], max_tokens: int) -> list[int]:
    tokens: list[int] = []
    request = GenerateRequest(key, tuple(ids), SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    async for output in engine.generate(request):  # streamed: deltas arrive as tokens are made
        for delta in output.deltas:
            tokens.extend(delta.token_ids)
    return tokens


async def _run(
    servable: ServableConfig, checkpoint: str | None, prompts: list[list[int]], max_tokens: int, group, batched: bool
) -> list[list[int]]:
    engine = LLMEngine(servable, checkpoint, EngineOptions(kv_cache_bytes=KV_BYTES, warmup=False, group=group))
    await engine.start()
    try:
        if batched:
            return list(
                await asyncio.gather(*(_collect(engine, f"r{i}", p, max_tokens) for i, p in enumerate(prompts)))
            )
        return [await _collect(engine, f"r{i}", p, max_tokens) for i, p in enumerate(prompts)]
    finally:
        await engine.stop()


def greedy_tokens(
    servable: ServableConfig,
    prompts: list[list[int]],
    max_tokens: int,
    group_size: int = 1,
    checkpoint: str | None = None,
    batched: bool = True,
) -> tuple[list[list[int]], list[int]]:
    """Each prompt's greedy tokens, and the workers' exit codes (empty for one process)."""
    with local_group(servable, group_size) as local:
        tokens = asyncio.run(_run(servable, checkpoint, prompts, max_tokens, local.leader, batched))
    workers = local.workers
    return tokens, [p.returncode for p in workers.processes]


def leader_main(argv: list[str] | None = None) -> int:
    """Rank 0 on its own (another host or network namespace): prints the greedy tokens as JSON.

    python -m tests.dist.group_runs --leader HOST:PORT --size N --model test.TinyLlamaRandom"""
    import argparse
    import json

    from tenor import registry
    from tenor.dist.leader import GroupLeader
    from tenor.dist.spec import GroupSpec, parse_leader

    parser = argparse.ArgumentParser()
    parser.add_argument("--leader", required=True)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--model", default="test.TinyLlamaRandom")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    host, port = parse_leader(args.leader)
    leader = GroupLeader(GroupSpec(args.size, 0, host, port, join_timeout_s=60))
    try:
        tokens = asyncio.run(_run(registry.get(args.model), None, TWO_HOST_PROMPTS, args.max_tokens, leader, True))
    finally:
        leader.stop()
    print(json.dumps(tokens))
    return 0


TWO_HOST_PROMPTS = [[1, 72, 101, 108, 108, 111], [5, 6, 7, 8, 9, 10, 11], list(range(30, 60))]

if __name__ == "__main__":
    raise SystemExit(leader_main())

"""The serving benchmark: streams a fixed prompt set at any OpenAI-compatible server and
reports throughput, TTFT, TPOT, ITL and end-to-end latency.

Used by `tenor bench` and by `benchmarks/serving.py`; both take the flags of `add_arguments`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from dataclasses import dataclass
from typing import Awaitable

import httpx

from tenor.bench.load import LoadShape, run_load
from tenor.bench.metrics import RequestRecord, summarize
from tenor.bench.prompts import load_prompts, make_prompts
from tenor.bench.report import BenchReport, RunInfo, format_table, write_json
from tenor.bench.stream_client import (
    ENDPOINT_PATHS,
    Endpoint,
    RequestParams,
    build_payload,
    fetch_model_name,
    fetch_runtime,
    stream_request,
)
from tenor.errors import UserError
from tenor.hardware import cpu_info


@dataclass(frozen=True)
class ServingBenchConfig:
    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None  # None: the first model at /v1/models
    endpoint: Endpoint = "completions"
    num_prompts: int = 64
    concurrency: int | None = None  # with request_rate also None: 1
    request_rate: float | None = None
    max_tokens: int = 128
    seed: int = 0
    request_timeout_s: float = 600.0
    warmup: int = 0  # requests sent first and left out of the metrics
    max_duration_s: float | None = None  # stop sending and abandon what is in flight after this
    prompts_file: str | None = None
    api_key: str | None = None
    ignore_eos: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {self.base_url!r}")
        if self.endpoint not in ENDPOINT_PATHS:
            raise ValueError(f"--endpoint must be one of {', '.join(ENDPOINT_PATHS)}, got {self.endpoint!r}")
        if self.num_prompts < 1:
            raise ValueError(f"--num-prompts must be at least 1, got {self.num_prompts}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"--request-timeout must be positive, got {self.request_timeout_s}")
        if self.max_duration_s is not None and not self.max_duration_s > 0:
            raise ValueError(f"--max-duration must be positive, got {self.max_duration_s}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        self.load_shape()  # validates concurrency and rate

    def load_shape(self) -> LoadShape:
        concurrency = 1 if self.concurrency is None and self.request_rate is None else self.concurrency
        return LoadShape(concurrency=concurrency, request_rate=self.request_rate, seed=self.seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ServingBenchConfig()
    add = parser.add_argument
    add("--base-url", default=d.base_url, help="server root, without /v1 (default %(default)s)")
    add("--model", default=None, help="model name to send (default: the first at /v1/models)")
    add("--endpoint", choices=sorted(ENDPOINT_PATHS), default=d.endpoint)
    add("--num-prompts", type=int, default=d.num_prompts)
    add("--concurrency", type=int, default=None, help="closed loop with C workers (default 1)")
    add("--request-rate", type=float, default=None, help="Poisson arrivals per second (seeded)")
    add("--max-tokens", type=int, default=d.max_tokens)
    add("--seed", type=int, default=d.seed, help="prompt set and arrival times")
    add("--request-timeout", type=float, default=d.request_timeout_s, help="seconds per request")
    add("--warmup", type=int, default=d.warmup, help="unmeasured requests sent first")
    add(
        "--max-duration",
        type=float,
        default=None,
        help="seconds: send nothing new after this and abandon requests still in flight",
    )
    add("--prompts-file", default=None, help="text file of prompts separated by blank lines")
    add("--api-key", default=None, help="sent as a bearer token")
    add("--ignore-eos", action="store_true", help="ask the server to generate max_tokens every time")
    add("--json-out", default=None, help="also write the results to this JSON file")
    add("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> ServingBenchConfig:
    return ServingBenchConfig(
        base_url=args.base_url.rstrip("/"),
        model=args.model,
        endpoint=args.endpoint,
        num_prompts=args.num_prompts,
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        max_tokens=args.max_tokens,
        seed=args.seed,
        request_timeout_s=args.request_timeout,
        warmup=args.warmup,
        max_duration_s=args.max_duration,
        prompts_file=args.prompts_file,
        api_key=args.api_key,
        ignore_eos=args.ignore_eos,
        progress=not args.no_progress,
    )


def _prompts(config: ServingBenchConfig) -> list[str]:
    if config.prompts_file:
        return load_prompts(config.prompts_file, config.num_prompts)
    return make_prompts(config.num_prompts, seed=config.seed)


async def run_benchmark_async(config: ServingBenchConfig) -> BenchReport:
    prompts = _prompts(config)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    # A fresh connection per request: reusing keep-alive connections raced with servers
    # closing idle ones (llama-server), failing requests the server never saw. On loopback
    # a connect costs well under a millisecond.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(config.request_timeout_s, connect=min(10.0, config.request_timeout_s))
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=timeout) as client:
        model = config.model or await fetch_model_name(client, config.base_url)
        server_runtime = await fetch_runtime(client, config.base_url)
        params = RequestParams(model, config.endpoint, config.max_tokens, config.ignore_eos)
        url = config.base_url + ENDPOINT_PATHS[config.endpoint]

        def send(prompt: str) -> Awaitable[RequestRecord]:
            body = build_payload(params, prompt)
            return stream_request(client, url, body, params.endpoint, config.request_timeout_s)

        # Warm-up prompts differ from the measured ones so no prefix cache flatters the run.
        for prompt in make_prompts(config.warmup, seed=config.seed + 1) if config.warmup else ():
            await send(prompt)
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        shape = config.load_shape()
        result = await run_load(prompts, send, shape, progress=config.progress, max_duration_s=config.max_duration_s)
    run = RunInfo(
        base_url=config.base_url,
        model=model,
        endpoint=config.endpoint,
        load=shape.describe(),
        num_prompts=config.num_prompts,
        max_tokens=config.max_tokens,
        seed=config.seed,
        ignore_eos=config.ignore_eos,
        max_duration_s=config.max_duration_s,
        date_utc=date,
        client_cpu=f"{cpu_info().model_name} ({cpu_info().isa}), {cpu_info().usable_cores} cores",
        server_runtime=server_runtime,
    )
    summary = summarize(result.records, result.duration_s, cut_off=result.cut_off, not_sent=result.not_sent)
    return BenchReport(run=run, summary=summary)


def run_benchmark(config: ServingBenchConfig) -> BenchReport:
    """Run the benchmark to the end (bounded by the per-request timeout) and return its report."""
    return asyncio.run(run_benchmark_async(config))


def run_from_args(args: argparse.Namespace) -> int:
    """Run, print the table, write JSON if asked; exit status 1 when any request failed."""
    report = run_benchmark(config_from_args(args))
    print(format_table(report))
    if args.json_out:
        write_json(report, args.json_out)
    return 1 if report.summary.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/serving.py", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except (UserError, ValueError) as exc:
        print(f"serving.py: error: {exc}", file=sys.stderr)
        return 2

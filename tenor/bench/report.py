"""A benchmark run as a table for people and as JSON for scripts."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from tenor.bench.metrics import BenchSummary, Distribution

_SOURCE_WORDS = {
    "usage": "from the servers' usage chunks",
    "chunks": "by counting streamed text chunks (no usage chunk)",
    "mixed": "from usage chunks where sent, else by counting chunks",
    "none": "none completed",
}


@dataclass(frozen=True)
class RunInfo:
    """What was measured, for the report's header and the JSON's `run` object."""

    base_url: str
    model: str
    endpoint: str
    load: str  # LoadShape.describe()
    num_prompts: int
    max_tokens: int
    seed: int
    ignore_eos: bool
    max_duration_s: float | None
    date_utc: str  # ISO 8601
    client_cpu: str = ""  # the benchmark machine's CPU and instruction sets
    server_runtime: str | None = None  # what a tenor server reports: CPU, threads, precision


@dataclass(frozen=True)
class BenchReport:
    run: RunInfo
    summary: BenchSummary


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _row(name: str, d: Distribution) -> str:
    cells = (d.mean_ms, d.p50_ms, d.p90_ms, d.p99_ms, d.max_ms)
    return f"{name:<6}" + "".join(f"{_cell(v):>10}" for v in cells) + f"{d.count:>8}"


def _unfinished(s: BenchSummary) -> str:
    if not (s.cut_off or s.not_sent):
        return ""
    return f", {s.cut_off} cut off and {s.not_sent} not sent at the time limit"


def format_table(report: BenchReport) -> str:
    run, s = report.run, report.summary
    total = "" if s.total_token_throughput is None else f" | {s.total_token_throughput:.1f} total tok/s"
    lines = [
        f"serving benchmark: {run.base_url}  model={run.model}  endpoint={run.endpoint}  ({run.date_utc})",
        f"load: {run.load} | {run.num_prompts} prompts | max_tokens {run.max_tokens}"
        + (" | ignore_eos" if run.ignore_eos else "")
        + ("" if run.max_duration_s is None else f" | time limit {run.max_duration_s:g} s"),
        f"cpu: {run.client_cpu or 'unknown'}"
        + ("" if run.server_runtime is None else f" | server: {run.server_runtime}"),
        f"requests: {s.completed} ok, {s.failed} failed{_unfinished(s)} | duration {s.duration_s:.2f} s",
        f"throughput: {s.request_throughput:.3f} req/s | {s.output_throughput:.1f} output tok/s{total}",
        f"output tokens: {s.total_output_tokens}, counted {_SOURCE_WORDS[s.token_source]}",
        "",
        f"{'ms':<6}" + "".join(f"{h:>10}" for h in ("mean", "p50", "p90", "p99", "max")) + f"{'n':>8}",
        _row("TTFT", s.ttft),
        _row("TPOT", s.tpot),
        _row("ITL", s.itl),
        _row("E2EL", s.e2el),
    ]
    if s.errors:
        lines += ["", "errors:"] + [f"  {count} x {message}" for message, count in s.errors]
    return "\n".join(lines)


def to_json_dict(report: BenchReport) -> dict[str, object]:
    summary = dataclasses.asdict(report.summary)
    summary["errors"] = [{"message": m, "count": c} for m, c in report.summary.errors]
    summary["output_tokens_counted_from"] = summary.pop("token_source")
    return {"run": dataclasses.asdict(report.run), "summary": summary}


def write_json(report: BenchReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json_dict(report), indent=2) + "\n", encoding="utf-8")

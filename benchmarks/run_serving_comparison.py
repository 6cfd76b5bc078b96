"""tenor vs a naive HF transformers server vs llama.cpp's llama-server, on the same GGUF,
in one run, with ratios against llama.cpp.

    python benchmarks/run_serving_comparison.py                  # all three, c=1 and c=32
    python benchmarks/run_serving_comparison.py --servers tenor,llama --points 1:8,32:64,64:128

Each server is started in turn on a free loopback port, waited for, benchmarked at every
point (concurrency:num_prompts), and stopped (also on Ctrl-C or SIGTERM). Results go to
--out-dir: one JSON per server and point, each server's log, comparison.json and
comparison.md. A point stops after --max-duration seconds; "unfinished" counts the requests
then still in flight or never sent.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tenor` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peer_servers import PeerOptions, RunningServer, server_specs  # noqa: E402
from tenor.bench.metrics import BenchSummary  # noqa: E402
from tenor.bench.report import format_table, write_json  # noqa: E402
from tenor.bench.serving import ServingBenchConfig, run_benchmark  # noqa: E402
from tenor.checkpoints.default_model import default_gguf_path  # noqa: E402
from tenor.hardware import cpu_info  # noqa: E402

REFERENCE = "llama.cpp"


@dataclass(frozen=True)
class Point:
    concurrency: int
    num_prompts: int

    @staticmethod
    def parse(text: str) -> "Point":
        try:
            c, n = (int(x) for x in text.split(":"))
        except ValueError:
            raise ValueError(f"a point is CONCURRENCY:NUM_PROMPTS, like 32:64; got {text!r}") from None
        if c < 1 or n < 1:
            raise ValueError(f"concurrency and prompt count must be at least 1, got {text!r}")
        return Point(c, n)


@dataclass(frozen=True)
class Row:
    server: str
    point: Point
    summary: BenchSummary | None  # None: the server never came up
    note: str = ""


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default="tenor,hf,llama", help="comma list of tenor, hf, llama")
    p.add_argument("--points", default="1:8,32:64", help="CONCURRENCY:NUM_PROMPTS, comma separated")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--ignore-eos", action="store_true", help="every request makes exactly --max-tokens tokens")
    p.add_argument("--gguf", type=Path, default=None, help="default: the default model's GGUF")
    p.add_argument("--threads", type=int, default=2, help="threads for llama-server and the HF baseline")
    p.add_argument("--llama-slots", type=int, default=32, help="llama-server -np")
    p.add_argument("--llama-server", type=Path, default=None, help="default: $LLAMA_SERVER or /work/peers build")
    p.add_argument("--tenor-args", default="", help="extra flags for `tenor serve`, one shell-quoted string")
    p.add_argument("--llama-args", default="", help="extra flags for llama-server, one shell-quoted string")
    p.add_argument(
        "--tenor-as-cpu",
        choices=("avx2", "avx512"),
        help="tenor: run the code such a CPU runs, through benchmarks/cpu_proxy.py",
    )
    p.add_argument(
        "--tenor-as-avx2", dest="tenor_as_cpu", action="store_const", const="avx2", help="--tenor-as-cpu avx2"
    )
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds a server may take to load")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    # The naive HF server serialises requests: at concurrency 32 a request waits for 31
    # others, so without a limit one point would take many minutes.
    p.add_argument(
        "--max-duration",
        type=float,
        default=300.0,
        help="seconds per point; what is still in flight then is cut off and reported",
    )
    p.add_argument("--out-dir", type=Path, default=None, help="default: a new /tmp/tenor-serving-* folder")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def _json_name(server: str, point: Point) -> str:
    return f"{server}-c{point.concurrency}-n{point.num_prompts}.json"


def _bench_server(server: RunningServer, points: list[Point], args: argparse.Namespace, out_dir: Path) -> list[Row]:
    rows = []
    for i, point in enumerate(points):
        config = ServingBenchConfig(
            base_url=server.base_url,
            endpoint=args.endpoint,
            num_prompts=point.num_prompts,
            concurrency=point.concurrency,
            max_tokens=args.max_tokens,
            request_timeout_s=args.request_timeout,
            ignore_eos=args.ignore_eos,
            warmup=1 if i == 0 else 0,
            progress=not args.no_progress,
            max_duration_s=args.max_duration,
        )
        report = run_benchmark(config)
        print(f"\n[{server.spec.name}]\n{format_table(report)}", flush=True)
        write_json(report, out_dir / _json_name(server.spec.name, point))
        rows.append(Row(server.spec.name, point, report.summary))
    return rows


def _ratio(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return "-"
    return f"{value / reference:.2f}x"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def comparison_markdown(rows: list[Row]) -> str:
    """One table per point; ratios divide by llama.cpp's figure at the same point."""
    lines = []
    for point in sorted({r.point for r in rows}, key=lambda p: p.concurrency):
        at = [r for r in rows if r.point == point]
        ref = next((r.summary for r in at if r.server == REFERENCE and r.summary), None)
        lines += [
            f"\n### concurrency {point.concurrency}, {point.num_prompts} prompts\n",
            "| server | ok/failed/unfinished | req/s | out tok/s | vs llama.cpp | TTFT p50 ms | TTFT p99 ms "
            "| TPOT p50 ms | vs llama.cpp | ITL p50 ms | E2EL p50 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in at:
            s = r.summary
            if s is None:
                lines.append(f"| {r.server} | {r.note} |" + " - |" * 9)
                continue
            lines.append(
                f"| {r.server} | {s.completed}/{s.failed}/{s.cut_off + s.not_sent} "
                f"| {_num(s.request_throughput, 3)} | {_num(s.output_throughput)} "
                f"| {_ratio(s.output_throughput, ref.output_throughput if ref else None)} | {_num(s.ttft.p50_ms)} "
                f"| {_num(s.ttft.p99_ms)} | {_num(s.tpot.p50_ms)} "
                f"| {_ratio(s.tpot.p50_ms, ref.tpot.p50_ms if ref else None)} "
                f"| {_num(s.itl.p50_ms)} | {_num(s.e2el.p50_ms)} |"
            )
    return "\n".join(lines) + "\n"


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through the finally blocks that stop servers

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        points = [Point.parse(p) for p in args.points.split(",") if p]
        options = PeerOptions(
            gguf=args.gguf or default_gguf_path(),
            threads=args.threads,
            llama_slots=args.llama_slots,
            llama_server=args.llama_server,
            tenor_args=tuple(shlex.split(args.tenor_args)),
            llama_args=tuple(shlex.split(args.llama_args)),
            tenor_as_cpu=args.tenor_as_cpu,
        )
        specs = server_specs([s.strip() for s in args.servers.split(",") if s.strip()], options)
    except (ValueError, FileNotFoundError) as exc:
        print(f"run_serving_comparison: error: {exc}", file=sys.stderr)
        return 2
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="tenor-serving-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    _stop_on_sigterm()
    rows: list[Row] = []
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for spec in specs:
        server = None
        try:
            server = RunningServer(spec, out_dir / f"{spec.name}.log")
            print(f"starting {spec.name}: {shlex.join(server.argv)}", flush=True)
            server.wait_ready(args.ready_timeout)
            rows += _bench_server(server, points, args, out_dir)
        except RuntimeError as exc:
            print(f"{spec.name}: {exc}", file=sys.stderr)
            rows += [Row(spec.name, p, None, "did not start") for p in points]
        finally:
            if server is not None:
                server.stop()
    table = comparison_markdown(rows)
    cpu = cpu_info()
    cpu_line = f"{cpu.model_name} ({cpu.isa}), {cpu.usable_cores} cores"
    header = (
        f"Serving comparison, {started}, CPU {cpu_line}, GGUF {options.gguf.name}, endpoint {args.endpoint}, "
        f"max_tokens {args.max_tokens}{' (ignore_eos)' if args.ignore_eos else ''}, threads {args.threads}, "
        f"at most {args.max_duration:g} s a point\n"
    )
    (out_dir / "comparison.md").write_text(header + table, encoding="utf-8")
    (out_dir / "comparison.json").write_text(
        json.dumps(
            {
                "started_utc": started,
                "cpu": {"model": cpu.model_name, "isa": cpu.isa, "cores": cpu.usable_cores, "flags": sorted(cpu.flags)},
                "gguf": str(options.gguf),
                "endpoint": args.endpoint,
                "max_tokens": args.max_tokens,
                "ignore_eos": args.ignore_eos,
                "commands": {s.name: list(s.argv) for s in specs},
                "results": [
                    json.loads((out_dir / _json_name(r.server, r.point)).read_text())
                    for r in rows
                    if r.summary is not None
                ],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    print("\n" + header + table + f"\nresults in {out_dir}")
    return 0 if all(r.summary is not None and r.summary.failed == 0 for r in rows) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)

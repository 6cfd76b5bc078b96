"""Disaggregated vs interleaved serving on two cores (issue 9): does moving prefill to its own
core keep long prompts from stalling the tokens of streams already decoding?

    python benchmarks/disagg.py [--runs 3] [--measure-s 90] [--long-every-s 10] [--py-spy DIR] \
        [--out benchmarks/results/disagg-DATE.json]

Each run starts, in turn, with real processes:

- interleaved: `tenor serve` pinned to both cores (`taskset -c 0,1`, 2 threads);
- disaggregated: a cell on a `file://` root in a temp dir: `tenor admin serve` and a model
  server tagged `prefill` pinned to core 0, a model server tagged `decode` pinned to core 1
  (1 thread each; tenor sizes its threads from the affinity mask, OMP_NUM_THREADS says the
  same), the model published with `disaggregated=true prefill_replicas=1 decode_replicas=1`
  (the admin places the roles); the load goes to the decode server's OpenAI face
  (`/models/lm/v1/completions`), which prefills on the prefill server and receives the KV
  blocks over gRPC.

The same load, from this process (not pinned, the same in both modes): `--streams` steady
streams with short prompts, each generating `--stream-tokens` tokens and restarted as it
ends, while long prompts (`--long-tokens` tokens of seeded random words, `--long-max-tokens`
generated) arrive every `--long-every-s` seconds. Measured over a window of `--measure-s`
seconds after a `--ramp-s` ramp: ITL of the steady streams (gaps between streamed chunks,
one token each), TTFT of the long prompts, output tokens/s of all streams, KV bytes moved
(the decode and prefill servers' `/metrics`), each server's CPU use. Before the load, one
long prompt is sent alone (its TTFT and bytes moved are the unloaded reference).

`--py-spy DIR` also samples each server with py-spy (collapsed stacks per thread) over the
window; py-spy's own CPU slows the servers, so profile in a run of its own.

Writes a markdown table to stdout and JSON to --out. Every process started is stopped (its
whole process group), also on errors and on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tenor` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mixed_load import (  # noqa: E402
    Load,
    Prompts,
    StreamLog,
    body,
    make_prompts,
    ms,
    run_load,
    stream,
    summarize_load,
)

REPO = Path(__file__).resolve().parent.parent
CELL = "/tenor/bench"
CELL_MODEL = f"{CELL}/lm"
BLOCK_SIZE = 16
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = str(threads)  # the same count tenor takes from the affinity mask
    return env


class Proc:
    """A child process in its own process group (`stop()` ends the group; idempotent)."""

    def __init__(self, name: str, cores: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        threads = len(cores.split(","))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                ["taskset", "-c", cores, *argv],  # taskset execs: the pid is the server's
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=child_env(threads),
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL)  # whatever is left of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def tenor_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "tenor.cli.main", *args]


def wait_for(what: str, probe: Any, timeout_s: float, procs: list[Proc], every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            proc.check()
        try:
            value = probe()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(every_s)
    tails = "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in procs)
    raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}\n{tails}")


def cli(root: str, *args: str, timeout_s: float = 120) -> str:
    done = subprocess.run(
        tenor_argv(*args, "--root", root),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(1),
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tenor {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


# ---------------------------------------------------------------- metrics and CPU


def scrape(url: str) -> str:
    return httpx.get(url, timeout=10).text


def metric(text: str, name: str) -> float:
    """Sum of every sample of `name` (any labels) in a Prometheus exposition; 0 if absent."""
    values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return sum(float(v) for v in values)


def runtime_info(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("tenor:runtime_info{"):
            return line[len("tenor:runtime_info{") : line.rfind("}")]
    return ""


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) and its reaped children, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12)) / CLK_TCK  # utime, stime


def thread_cpu(pid: int) -> dict[int, float]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def core_times() -> dict[str, tuple[int, int]]:
    """(busy, total) jiffies of each core, from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(v) for v in values[:8]]
            idle = ticks[3] + ticks[4]  # idle + iowait
            out[name] = (sum(ticks) - idle, sum(ticks))
    return out


def host_cpu() -> dict[str, object]:
    name = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    lscpu = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), name)
    return {"model_name": model or name, "cpuinfo_name": name, "cores": os.cpu_count()}


# ---------------------------------------------------------------- modes


@dataclass
class Target:
    """Where the load goes, and what to read before and after it."""

    base_url: str  # OpenAI face: {base_url}/v1/completions
    model: str
    pids: dict[str, int]  # server name -> pid, for CPU use
    metrics: dict[str, str]  # server name -> /metrics URL (transfer counters)
    engine_metrics: str  # the engine's /metrics (runtime_info)


def cpu_snapshot(pids: dict[str, int]) -> dict[str, Any]:
    snapshot: dict[str, Any] = {name: (cpu_seconds(pid), thread_cpu(pid)) for name, pid in pids.items()}
    snapshot["load generator"] = (sum(os.times()[:2]), {})
    snapshot[""] = core_times()
    return snapshot


def cpu_use(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict:
    """Cores each process kept busy (and its busiest threads), and each core's busy share."""
    out: dict[str, Any] = {
        "core_busy": {
            core: round((busy - before[""][core][0]) / max(1, total - before[""][core][1]), 2)
            for core, (busy, total) in after[""].items()
        }
    }
    for name, (total, threads) in after.items():
        if not name:
            continue
        busy = sorted(
            ((t - before[name][1].get(tid, 0.0)) / seconds for tid, t in threads.items()),
            reverse=True,
        )
        out[name] = {
            "cores_busy": round((total - before[name][0]) / seconds, 2),
            "top_threads_busy": [round(b, 2) for b in busy[:4]],
            "threads": len(threads),
        }
    return out


TRANSFER_METRICS = (
    "tenor:kv_transfer_received_bytes_total",
    "tenor:kv_transfer_received_blocks_total",
    "tenor:kv_transfer_sent_bytes_total",
    "tenor:kv_transfers_sent_total",
    "tenor:kv_transfers_failed_total",
    "tenor:kv_transfers_retried_total",
    "tenor:kv_transfer_skipped_blocks_total",
    "tenor:kv_transfer_latency_seconds_sum",
    "tenor:kv_transfer_latency_seconds_count",
    'tenor:disagg_prefills_total{model="%s",where="remote"}' % CELL_MODEL,
    'tenor:disagg_prefills_total{model="%s",where="local_fallback"}' % CELL_MODEL,
)


def py_spy(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` for `seconds`: collapsed stacks, per thread, of the threads that
    run (not idle), at 100 Hz."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["py-spy", "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100", "-f", "raw", "-o", str(out)]
    return subprocess.Popen([*argv, "--threads", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def transfer_counters(target: Target) -> dict[str, float]:
    out: dict[str, float] = {}
    for text in (scrape(url) for url in target.metrics.values()):
        for name in TRANSFER_METRICS:
            out[name] = out.get(name, 0.0) + metric(text, name)
    return out


def alone(target: Target, prompt: str, max_tokens: int) -> tuple[float, dict[str, float]]:
    """TTFT of one long prompt with nothing else running, and the counters it moved."""
    before = transfer_counters(target)
    log = StreamLog("long", time.perf_counter())
    asyncio.run(_one_url(f"{target.base_url}/v1/completions", target.model, prompt, max_tokens, log))
    if log.error or not log.times:
        raise RuntimeError(f"the lone long prompt failed: {log.error or 'no tokens'}")
    after = transfer_counters(target)
    return log.times[0] - log.sent, {k: after[k] - before[k] for k in after}


async def _one_url(url: str, model: str, prompt: str, max_tokens: int, log: StreamLog) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        await stream(client, url, body(model, prompt, max_tokens), log)


def measure(
    target: Target, prompts: Prompts, load: Load, lone_prompt: str, profile: Path | None = None
) -> dict[str, object]:
    lone_ttft, lone_moved = alone(target, lone_prompt, load.long_max_tokens)
    marks: dict[str, tuple[float, dict[str, float], dict]] = {}
    profilers: list[subprocess.Popen[bytes]] = []

    def on_window(mark: str) -> None:
        marks[mark] = (time.perf_counter(), transfer_counters(target), cpu_snapshot(target.pids))
        if mark == "start" and profile is not None:
            profilers.extend(py_spy(pid, profile / f"{name}.txt", load.measure_s) for name, pid in target.pids.items())

    try:
        result = asyncio.run(run_load(f"{target.base_url}/v1/completions", target.model, prompts, load, on_window))
    finally:
        for proc in profilers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()
    after = transfer_counters(target)
    summary = summarize_load(result)
    (t_start, c_start, cpu_start), (t_end, _, cpu_end) = marks["start"], marks["end"]
    moved = {k: after[k] - c_start[k] for k in after}  # the window and the grace after it
    remote = moved[TRANSFER_METRICS[9]]
    received = moved["tenor:kv_transfer_received_bytes_total"]
    transfers = moved["tenor:kv_transfer_latency_seconds_count"]
    lone_bytes = lone_moved["tenor:kv_transfer_received_bytes_total"]
    summary.update(
        {
            "long_alone_ttft_ms": ms(lone_ttft),
            "kv_mb_long_alone": round(lone_bytes / 1e6, 2),
            "kv_blocks_long_alone": lone_moved["tenor:kv_transfer_received_blocks_total"],
            "kv_mb_received": round(received / 1e6, 1),
            "kv_mb_per_request": round(received / 1e6 / remote, 2) if remote else 0.0,
            "remote_prefills": remote,
            "local_fallbacks": moved[TRANSFER_METRICS[10]],
            "blocks_skipped": moved["tenor:kv_transfer_skipped_blocks_total"],
            "transfers_failed": moved["tenor:kv_transfers_failed_total"],
            "kv_transfer_mean_ms": round(1000 * moved["tenor:kv_transfer_latency_seconds_sum"] / transfers, 1)
            if transfers
            else None,
            "cpu": cpu_use(cpu_start, cpu_end, t_end - t_start),
            "runtime": runtime_info(scrape(target.engine_metrics)),
        }
    )
    return summary


@contextlib.contextmanager
def interleaved(model: str, cores: str, log_dir: Path) -> Iterator[Target]:
    port = free_port()
    proc = Proc("interleaved", cores, tenor_argv("serve", "--model", model, "--port", str(port)), log_dir)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for("tenor serve", lambda: httpx.get(f"{base}/health", timeout=5).status_code == 200, 600, [proc])
        name = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        yield Target(base, name, {"interleaved": proc.pid}, {"interleaved": f"{base}/metrics"}, f"{base}/metrics")
    finally:
        proc.stop()


@contextlib.contextmanager
def disaggregated(model: str, prefill_core: str, decode_core: str, log_dir: Path) -> Iterator[Target]:
    """A cell on a file:// root: the admin and the prefill server on `prefill_core`, the decode
    server on `decode_core`; the admin places the roles (the servers' tags steer them)."""
    root_dir = Path(tempfile.mkdtemp(prefix="tenor-disagg-root-"))
    root = f"file://{root_dir}"
    procs: list[Proc] = []
    try:
        admin_args = ["--cell", CELL, "--root", root, "--port", str(free_port()), "--http-port", "-1"]
        admin_args += ["--poll-interval", "0.5", "--startup-grace", "0.5"]
        procs.append(Proc("admin", prefill_core, tenor_argv("admin", "serve", *admin_args), log_dir))
        grpc, http = {}, {}
        for role, core in (("prefill", prefill_core), ("decode", decode_core)):
            grpc[role], http[role] = free_port(), free_port()
            args = ["--cell", CELL, "--root", root, "--port", str(grpc[role]), "--http-port", str(http[role])]
            args += ["--tags", role, "--rejoin-interval", "0.5"]
            procs.append(Proc(role, core, tenor_argv("model-server", "serve", *args), log_dir))
        wait_for("the admin to lead", lambda: "leading" in procs[0].log_path.read_text(errors="replace"), 120, procs)
        split = ("disaggregated=true", "prefill_replicas=1", "decode_replicas=1")
        cli(root, "publish", CELL_MODEL, model, "None", "2", *split)
        urls = {role: f"http://127.0.0.1:{port}" for role, port in http.items()}

        def loaded() -> bool:
            states = [httpx.get(f"{u}/healthcheck", timeout=5).json().get("models", {}) for u in urls.values()]
            return all(s.get(CELL_MODEL) == "LOADED" for s in states)

        wait_for("both replicas to load", loaded, 900, procs, every_s=2)
        listed = cli(root, "ls", CELL_MODEL)
        for role in ("prefill", "decode"):
            if f"127.0.0.1:{grpc[role]} ({role})" not in listed:
                raise RuntimeError(f"the {role} replica is not on the server pinned for it:\n{listed}")
        base = f"{urls['decode']}/models/lm"
        remote = TRANSFER_METRICS[9]
        tries = iter(range(10_000))

        def prefilled_remotely() -> bool:
            # A new 3-block prompt each try: the decode replica prefills locally until WatchLoc
            # has told it of the prefill replica.
            prompt = f"warm-up {next(tries)}: " + " ".join(["a long enough prompt for a few blocks"] * 6)
            log = StreamLog("warm-up", time.perf_counter())
            asyncio.run(_one_url(f"{base}/v1/completions", CELL_MODEL, prompt, 4, log))
            return not log.error and metric(scrape(f"{urls['decode']}/metrics"), remote) >= 1

        wait_for("a request prefilled on the prefill server", prefilled_remotely, 120, procs, every_s=1)
        yield Target(
            base,
            CELL_MODEL,
            {"prefill": procs[1].pid, "decode": procs[2].pid},
            {role: f"{u}/metrics" for role, u in urls.items()},
            f"{base}/metrics",
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(root_dir, ignore_errors=True)


# ---------------------------------------------------------------- main


def median_of(runs: list[dict], mode: str, path: tuple[str, ...]) -> float | None:
    values = []
    for run in runs:
        value: Any = run[mode]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(float(value))
    return round(statistics.median(values), 1) if values else None


COLUMNS = (
    ("ITL p50 ms", ("itl_ms", "p50")),
    ("ITL p99 ms", ("itl_ms", "p99")),
    ("ITL max ms", ("itl_ms", "max")),
    ("long TTFT p50 ms", ("long_ttft_ms", "p50")),
    ("long TTFT p99 ms", ("long_ttft_ms", "p99")),
    ("long TTFT alone ms", ("long_alone_ttft_ms",)),
    ("output tok/s", ("output_tok_s",)),
    ("KV MB / long prompt", ("kv_mb_long_alone",)),
    ("KV MB / request", ("kv_mb_per_request",)),
)


def table(runs: list[dict], modes: list[str]) -> str:
    head = "| mode | run | " + " | ".join(c for c, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for mode in modes:
        for i, run in enumerate(runs, 1):
            cells = []
            for _, path in COLUMNS:
                value: Any = run[mode]
                for key in path:
                    value = value.get(key) if isinstance(value, dict) else None
                cells.append("-" if value is None else f"{value:g}")
            lines.append(f"| {mode} | {i} | " + " | ".join(cells) + " |")
        if len(runs) > 1:
            medians = [median_of(runs, mode, path) for _, path in COLUMNS]
            lines.append(f"| {mode} | median | " + " | ".join("-" if v is None else f"{v:g}" for v in medians) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama.SmolLM2_135M_Instruct", help="registry name (both modes)")
    parser.add_argument("--runs", type=int, default=1, help="runs, each of every mode (default 1)")
    parser.add_argument("--modes", default="interleaved,disaggregated")
    parser.add_argument("--cores", default="0,1", help="the two cores: prefill (and admin) on the first")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream-tokens", type=int, default=256, help="tokens each steady request generates")
    parser.add_argument("--steady-words", type=int, default=24, help="random words in a steady prompt")
    parser.add_argument("--long-tokens", default="1024,2000", help="long prompt length range, tokens")
    parser.add_argument("--long-max-tokens", type=int, default=16, help="tokens each long prompt generates")
    parser.add_argument("--long-every-s", type=float, default=10.0, help="one long prompt every S seconds")
    parser.add_argument("--ramp-s", type=float, default=10.0, help="steady streams only, not measured")
    parser.add_argument("--measure-s", type=float, default=90.0, help="the measured window")
    parser.add_argument("--grace-s", type=float, default=60.0, help="for long prompts still running after it")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default: none)")
    parser.add_argument(
        "--py-spy", type=Path, default=None, help="profile each server with py-spy over the window into DIR"
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="server logs (default: a temp dir)")
    args = parser.parse_args(argv)
    cores = args.cores.split(",")
    if len(cores) != 2 or not all(c.isdigit() for c in cores) or cores[0] == cores[1]:
        parser.error("--cores takes two different core numbers, e.g. 0,1")
    lo, _, hi = args.long_tokens.partition(",")
    if not (lo.isdigit() and hi.isdigit() and 16 < int(lo) <= int(hi)):
        parser.error("--long-tokens takes MIN,MAX tokens, 16 < MIN <= MAX")
    args.long_range = (int(lo), int(hi))
    args.mode_list = args.modes.split(",")
    if not args.mode_list or set(args.mode_list) - {"interleaved", "disaggregated"}:
        parser.error("--modes: interleaved and/or disaggregated")
    if args.runs < 1 or args.streams < 1 or args.measure_s <= 0 or args.long_every_s <= 0:
        parser.error("--runs, --streams, --measure-s and --long-every-s must be positive")
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: the servers are stopped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    first, second = args.cores.split(",")
    load = Load(
        args.streams,
        args.stream_tokens,
        args.long_every_s,
        args.long_max_tokens,
        args.ramp_s,
        args.measure_s,
        args.grace_s,
    )
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tenor-disagg-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "benchmark": "disaggregated vs interleaved on two cores (issue 9)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join(["python", "benchmarks/disagg.py", *(sys.argv[1:] if argv is None else argv)]),
        "cpu": host_cpu(),
        "model": args.model,
        "load": {**load.__dict__, "long_tokens": args.long_range, "steady_words": args.steady_words},
        "cores": {"interleaved": args.cores, "prefill_and_admin": first, "decode": second},
        "runs": [],
    }
    print(f"CPU: {report['cpu']['model_name']}; logs in {log_dir}", flush=True)
    prompts: Prompts | None = None
    n_long = math.ceil(args.measure_s / args.long_every_s) + 1  # the last one is sent alone first
    for run in range(args.runs):
        results: dict[str, Any] = {}
        for mode in args.mode_list:
            print(f"run {run + 1}: {mode} ...", flush=True)
            if mode == "interleaved":
                ctx = interleaved(args.model, args.cores, log_dir / f"run{run + 1}")
            else:
                ctx = disaggregated(args.model, first, second, log_dir / f"run{run + 1}")
            (log_dir / f"run{run + 1}").mkdir(exist_ok=True)
            with ctx as target:
                if prompts is None:
                    lo, hi = args.long_range
                    prompts = make_prompts(target.base_url, n_long, lo, hi, args.steady_words, args.seed)
                    report["long_prompt_tokens"] = prompts.long_tokens
                profile = args.py_spy / f"run{run + 1}-{mode}" if args.py_spy else None
                results[mode] = measure(target, prompts, load, prompts.long[-1], profile)
            print(json.dumps(results[mode], indent=None), flush=True)
        report["runs"].append(results)
        report["median"] = {
            mode: {" ".join(path): median_of(report["runs"], mode, path) for _, path in COLUMNS}
            for mode in args.mode_list
        }
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(f"CPU: {report['cpu']['model_name']} ({report['cpu']['cores']} cores)")
    print(table(report["runs"], args.mode_list))
    return 0


if __name__ == "__main__":
    sys.exit(main())

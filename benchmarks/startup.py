"""Start-up: seconds from launching a server to its ready route answering 200 (the model loaded,
the port open), for `tenor serve` from the working tree, from the tree at --base REV, and for
llama.cpp's llama-server on the same GGUF, round after round, each round in a turned order.

    python benchmarks/startup.py --base HEAD~3 [--rounds 5] [--llama-server PATH]

Each side's kernels are built before the first timed round (an untimed start), so the figures are
what a user sees from the second `tenor serve` on. Prints each round and the medians with their
ratios; writes them to --out-dir.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tenor` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peer_servers import PeerOptions, RunningServer, ServerSpec, server_specs  # noqa: E402
from benchmarks.served_ab import base_tree, tenor_specs  # noqa: E402
from tenor.checkpoints.default_model import default_gguf_path  # noqa: E402
from tenor.hardware import cpu_info  # noqa: E402

POLL_S = 0.05


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default=None, help="also time `tenor serve` from this git revision")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--llama-server", type=Path, default=None, help="default: as run_serving_comparison.py finds it")
    p.add_argument("--no-llama", action="store_true", help="time tenor alone")
    p.add_argument("--ready-timeout", type=float, default=900.0, help="seconds a server may take to build and load")
    p.add_argument("--out-dir", type=Path, default=None, help="default: a new /tmp/tenor-startup-* folder")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def _seconds_to_ready(spec: ServerSpec, log: Path, timeout_s: float) -> float:
    start = time.monotonic()
    server = RunningServer(spec, log)
    try:
        server.wait_ready(timeout_s, poll_s=POLL_S)
        return time.monotonic() - start
    finally:
        server.stop()


def _specs(args: argparse.Namespace, tmp: Path) -> dict[str, ServerSpec]:
    gguf = default_gguf_path()
    if args.base is not None:
        specs = tenor_specs(base_tree(args.base, tmp))  # this CPU's code, no extra flags
    else:
        (ours,) = server_specs(["tenor"], PeerOptions(gguf=gguf))
        specs = {"new": ours}
    if not args.no_llama:
        (llama,) = server_specs(["llama"], PeerOptions(gguf=gguf, llama_server=args.llama_server))
        specs["llama.cpp"] = llama
    return specs


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="tenor-startup-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tenor-base-") as tmp:
        try:
            specs = _specs(args, Path(tmp))
        except (ValueError, OSError) as exc:
            print(f"startup: error: {exc}", file=sys.stderr)
            return 2
        sides = ["new", *(side for side in specs if side != "new")]
        times: dict[str, list[float]] = {side: [] for side in sides}
        try:
            for side in sides:  # builds each tree's kernels; not timed
                _seconds_to_ready(specs[side], out_dir / f"{side}-build.log", args.ready_timeout)
            for r in range(args.rounds):
                order = sides[r % len(sides) :] + sides[: r % len(sides)]
                for side in order:
                    times[side].append(_seconds_to_ready(specs[side], out_dir / f"{side}-{r}.log", args.ready_timeout))
                print(f"round {r + 1}: " + ", ".join(f"{s} {times[s][-1]:.2f} s" for s in sides), flush=True)
        except RuntimeError as exc:
            print(f"startup: {exc}", file=sys.stderr)
            return 1
    medians = {side: statistics.median(values) for side, values in times.items()}
    cpu = cpu_info()
    result = {
        "cpu": {"model": cpu.model_name, "isa": cpu.isa, "cores": cpu.usable_cores},
        "base": args.base,
        "seconds_to_ready": times,
        "medians": medians,
    }
    (out_dir / "startup.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("median seconds to ready: " + ", ".join(f"{s} {m:.2f}" for s, m in medians.items()))
    for other in sides[1:]:
        ratios = [new / theirs for new, theirs in zip(times["new"], times[other])]
        print(f"working tree / {other}: median of the rounds' ratios {statistics.median(ratios):.2f}")
    print(f"results in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B of two tenor versions as served: the working tree against --base REV, started in turn on the
same machine and benchmarked at one point (concurrency:num_prompts, every request --max-tokens
long), round after round, each round in the other order, so that the machine's slow spells touch
both alike. Where served rounds of one build spread 10 % (benchmarks/RESULTS.md), the median of
these paired ratios shows a change of a few percent.

    python benchmarks/served_ab.py --base HEAD~1 [--as-cpu avx2] [--rounds 4] [--point 32:64]
    python benchmarks/served_ab.py --base HEAD --new-env GOMP_SPINCOUNT=10000   # a setting alone
    python benchmarks/served_ab.py --base HEAD --new-args=--quantize-kv-cache    # a flag alone

The base runs from a copy of REV's tree (`git archive`), its own tenor package first on
PYTHONPATH; each side's kernels are built on its first start. Prints each round's output tok/s
and TTFT p50, and the median ratio working tree / base; writes them to --out-dir.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tenor` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.peer_servers import PeerOptions, RunningServer, ServerSpec, server_specs  # noqa: E402
from benchmarks.run_serving_comparison import Point  # noqa: E402
from tenor.bench.serving import ServingBenchConfig, run_benchmark  # noqa: E402
from tenor.checkpoints.default_model import default_gguf_path  # noqa: E402
from tenor.hardware import cpu_info  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the git revision to compare the working tree against")
    p.add_argument("--as-cpu", default=None, help="run both as benchmarks/cpu_proxy.py's ISA (avx2, avx512)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of one run each (default 4)")
    p.add_argument("--point", default="32:64", help="CONCURRENCY:NUM_PROMPTS (default 32:64)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--tenor-args", default="", help="extra flags for `tenor serve` on both sides")
    p.add_argument(
        "--new-args",
        default="",
        help="extra flags for the working tree's `tenor serve` only (with --base HEAD: an A/B of the flags alone)",
    )
    p.add_argument(
        "--new-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set for the working tree's server only (with --base HEAD: an A/B of the setting alone)",
    )
    p.add_argument("--ready-timeout", type=float, default=900.0, help="seconds a server may take to build and load")
    p.add_argument("--out-dir", type=Path, default=None, help="default: a new /tmp/tenor-served-ab-* folder")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if any("=" not in item for item in args.new_env):
        p.error("--new-env takes KEY=VALUE")
    return args


def base_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def tenor_specs(
    base: Path, as_cpu: str | None = None, tenor_args: str = "", new_args: str = "", new_env: Sequence[str] = ()
) -> dict[str, ServerSpec]:
    """`tenor serve` from the working tree ("new") and from the tree at `base` ("base"), each with
    the flags in `tenor_args` and narrowed to `as_cpu`'s code (benchmarks/cpu_proxy.py) where it is
    given; "new" also with the flags in `new_args` and the KEY=VALUE settings in `new_env`."""
    options = PeerOptions(gguf=default_gguf_path(), tenor_args=tuple(shlex.split(tenor_args)), tenor_as_cpu=as_cpu)
    (ours,) = server_specs(["tenor"], options)
    # the base's own cpu_proxy.py and tenor package: PYTHONPATH comes before the editable install,
    # and the base starts in its own tree, since `python -m` puts the folder it starts in first
    # (from the repository's root, the working tree's tenor: the base ran the new code)
    argv = tuple(str(base / "benchmarks" / "cpu_proxy.py") if a.endswith("cpu_proxy.py") else a for a in ours.argv)
    theirs = replace(ours, argv=argv, env=(("PYTHONPATH", str(base)),), cwd=str(base))
    settings = tuple((key, value) for key, value in (item.split("=", 1) for item in new_env))
    return {"base": theirs, "new": replace(ours, argv=ours.argv + tuple(shlex.split(new_args)), env=settings)}


def _one_run(spec: ServerSpec, point: Point, args: argparse.Namespace, log: Path) -> dict[str, float]:
    server = RunningServer(spec, log)
    try:
        server.wait_ready(args.ready_timeout)
        config = ServingBenchConfig(
            base_url=server.base_url,
            num_prompts=point.num_prompts,
            concurrency=point.concurrency,
            max_tokens=args.max_tokens,
            ignore_eos=True,
            warmup=1,
            progress=False,
        )
        summary = run_benchmark(config).summary
    finally:
        server.stop()
    if summary.failed or summary.output_throughput is None or summary.ttft.p50_ms is None:
        raise RuntimeError(f"{summary.failed} requests failed; see {log}")
    return {"output_tok_s": summary.output_throughput, "ttft_p50_s": summary.ttft.p50_ms / 1000}


def _round_line(got: dict[str, dict[str, float]]) -> str:
    new, base = got["new"], got["base"]
    return (
        f"new {new['output_tok_s']:.1f} tok/s (TTFT p50 {new['ttft_p50_s']:.2f} s), "
        f"base {base['output_tok_s']:.1f} ({base['ttft_p50_s']:.2f} s), "
        f"new/base {new['output_tok_s'] / base['output_tok_s']:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    point = Point.parse(args.point)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="tenor-served-ab-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="tenor-base-") as tmp:
        try:
            specs = tenor_specs(
                base_tree(args.base, Path(tmp)), args.as_cpu, args.tenor_args, args.new_args, args.new_env
            )
        except subprocess.CalledProcessError as exc:
            print(f"served_ab: error: git archive {args.base}: {exc.stderr.decode().strip()}", file=sys.stderr)
            return 2
        for r in range(args.rounds):
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            try:
                rounds.append({side: _one_run(specs[side], point, args, out_dir / f"{side}-{r}.log") for side in order})
            except RuntimeError as exc:
                print(f"served_ab: round {r + 1}: {exc}", file=sys.stderr)
                return 1
            print(f"round {r + 1}: {_round_line(rounds[-1])}", flush=True)
    ratios = [got["new"]["output_tok_s"] / got["base"]["output_tok_s"] for got in rounds]
    cpu = cpu_info()
    result = {
        "cpu": {"model": cpu.model_name, "isa": cpu.isa, "cores": cpu.usable_cores},
        "base": args.base,
        "new_env": args.new_env,
        "new_args": args.new_args,
        "as_cpu": args.as_cpu,
        "point": args.point,
        "max_tokens": args.max_tokens,
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
    }
    (out_dir / "served_ab.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"output tok/s, working tree / {args.base}: median {statistics.median(ratios):.3f} over {len(ratios)} rounds")
    print(f"({', '.join(f'{x:.3f}' for x in ratios)}); results in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

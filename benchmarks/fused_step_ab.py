"""The fused Llama step (every layer in one native call), paired: step_profile.py's closed loop,
where every step that fuses runs two ways on the same inputs, in alternating order (both write the
same k/v), so that the machine's drift touches each pair alike. The two ways:

- by default, the fused step against the layer-by-layer path;
- with --base REV, the fused step built from REV's tenor/csrc against the working tree's (the
  same Python around both), for a kernel change the whole step feels.

Prints the median ratio (and its quartiles) for decode steps and for steps with prompt chunks,
after step_profile's own report (whose steps hold both runs).

    python benchmarks/fused_step_ab.py [--base HEAD~1] [--as-cpu avx2|avx512] [step_profile.py's flags]
"""

from __future__ import annotations

import collections
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import step_profile  # noqa: E402
from benchmarks.kernel_ab import _base_csrc, _build  # noqa: E402
from tenor.models import native  # noqa: E402
from tenor.models.decoder import DecoderLM  # noqa: E402
from tenor.models.llama import LlamaModel  # noqa: E402

RATIOS: collections.defaultdict[str, list[float]] = collections.defaultdict(list)


def _base_library(rev: str, into: Path) -> ctypes.CDLL:
    """REV's tenor/csrc, built with tenor's own flags (native.FLAGS, which --as-cpu narrows)."""
    out = into / "base.so"
    _build(_base_csrc(rev, into), "native", out)
    return native.load(out)


def _with_library(lib: ctypes.CDLL, forward: Callable) -> Callable:
    def call(*args):
        built = native._built
        native._built = lambda: lib  # type: ignore[assignment]
        try:
            return forward(*args)
        finally:
            native._built = built  # type: ignore[assignment]

    return call


def _paired(base: str | None, scratch: Path) -> str:
    """Installs the pairing; returns the ratio's name."""
    fused_forward = LlamaModel.forward
    sides: list[tuple[str, Callable]] = [("fused", fused_forward), ("layered", DecoderLM.forward)]
    ratio = "fused / layer-by-layer"
    turn = [False]

    def both(self, input_ids, positions, cache, batch, logits_rows):
        if not self._can_fuse(cache, batch, len(input_ids)):
            return fused_forward(self, input_ids, positions, cache, batch, logits_rows)
        if base is not None and sides[1][0] == "layered":  # built here, after --as-cpu narrowed the flags
            sides[:] = [("new", fused_forward), ("base", _with_library(_base_library(base, scratch), fused_forward))]
        turn[0] = not turn[0]
        seconds = {}
        for name, forward in sides if turn[0] else sides[::-1]:
            start = time.perf_counter()
            logits = forward(self, input_ids, positions, cache, batch, logits_rows)
            seconds[name] = time.perf_counter() - start
        first, second = (name for name, _ in sides)
        RATIOS["with prompts" if batch.prefills else "decode"].append(seconds[first] / seconds[second])
        return logits

    LlamaModel.forward = both  # type: ignore[method-assign]
    return ratio if base is None else f"working tree / {base}"


def main() -> None:
    parser = step_profile.arguments(__doc__)
    parser.add_argument("--base", help="a git revision: its fused step against the working tree's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        ratio = _paired(args.base, Path(scratch))
        try:
            step_profile.run(args)
        finally:
            for kind, ratios in RATIOS.items():
                q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
                print(f"{kind}: {ratio} {median:.3f} (quartiles {q1:.3f}-{q3:.3f}), {len(ratios)} steps")


if __name__ == "__main__":
    main()

"""The fused Llama step (every layer in one native call) against the layer-by-layer path, paired:
step_profile.py's closed loop, where every step that fuses runs both ways on the same inputs, in
alternating order (both write the same k/v), so that the machine's drift touches each pair alike.
Prints the median ratio fused / layer-by-layer (and its quartiles) for decode steps and for steps
with prompt chunks, after step_profile's own report (whose steps hold both runs).

    python benchmarks/fused_step_ab.py [--as-cpu avx2|avx512] [step_profile.py's flags]
"""

from __future__ import annotations

import collections
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import step_profile  # noqa: E402
from tenor.models.decoder import DecoderLM  # noqa: E402
from tenor.models.llama import LlamaModel  # noqa: E402

RATIOS: collections.defaultdict[str, list[float]] = collections.defaultdict(list)


def _paired() -> None:
    fused_forward = LlamaModel.forward
    turn = [False]

    def both(self, input_ids, positions, cache, batch, logits_rows):
        if not self._can_fuse(cache, batch, len(input_ids)):
            return fused_forward(self, input_ids, positions, cache, batch, logits_rows)
        turn[0] = not turn[0]
        sides = [("fused", fused_forward), ("layered", DecoderLM.forward)]
        seconds = {}
        for name, forward in sides if turn[0] else sides[::-1]:
            start = time.perf_counter()
            logits = forward(self, input_ids, positions, cache, batch, logits_rows)
            seconds[name] = time.perf_counter() - start
        RATIOS["with prompts" if batch.prefills else "decode"].append(seconds["fused"] / seconds["layered"])
        return logits

    LlamaModel.forward = both  # type: ignore[method-assign]


def main() -> None:
    _paired()
    try:
        step_profile.main(__doc__)
    finally:
        for kind, ratios in RATIOS.items():
            q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            print(f"{kind}: fused / layer-by-layer {median:.3f} (quartiles {q1:.3f}-{q3:.3f}), {len(ratios)} steps")


if __name__ == "__main__":
    main()

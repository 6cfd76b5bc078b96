"""What transparent huge pages (tenor/hugepages.py) give tenor's kernels, paired in one process:
each workload runs on the same values in ordinary 4 KB pages and in huge pages, in turn, so that
the machine's drift touches both alike.

- attention: attention_ab.py's decode step (32 sequences of 190-320 cached tokens, 30 layers, the
  default model's heads, blocks of 16 scattered over the cache), each layer's K/V in 4 KB pages
  against one `hugepages.zeros` tensor for every layer, as PagedKVCache allocates it;
- linears: the default model's 120 linears (qkv, o, gate_up, down; 4-bit blocks, `int8a8`) at 1,
  8 and 32 rows, built with and without `hugepages.keep`.

    python benchmarks/hugepages_ab.py [--as-cpu avx2|avx512] [--kv bf16,f32,int8] [--repeats 21]

Prints each side's median time and the ratio huge / 4 KB (below 1: huge pages are faster).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cpu_proxy  # noqa: E402

if TYPE_CHECKING:  # torch is imported after --as-cpu narrows the build
    import torch


def _line(name: str, medians: dict[str, float]) -> str:
    small, huge = medians["4k"], medians["huge"]
    return f"{name}: 4 KB pages {small * 1e3:.2f} ms, huge pages {huge * 1e3:.2f} ms, huge / 4 KB {huge / small:.3f}"


def attention(kvs: list[str], repeats: int) -> None:
    import torch

    from benchmarks import attention_ab
    from benchmarks.kernel_ab import medians_in_turn
    from tenor import hugepages
    from tenor.models import native

    lib = native.library()
    assert lib is not None, "tenor's kernels did not build"
    for kv in kvs:
        plain = attention_ab.decode_workload(kv)
        huge = copy.copy(plain)
        first = plain.caches[0][0]  # like PagedKVCache: every layer's K and V in one tensor
        store = hugepages.zeros((len(plain.caches), 2, *first.shape), first.dtype)
        huge.caches = []
        for layer, (k, v, *scales) in enumerate(plain.caches):
            store[layer, 0].copy_(k)
            store[layer, 1].copy_(v)
            huge.caches.append((store[layer, 0], store[layer, 1], *scales))  # int8's scales: 4 KB pages, as there
        scratch = torch.empty(native.attention_scratch_floats(torch.get_num_threads(), 1, 3, 512))
        out = torch.empty_like(plain.q)
        medians = medians_in_turn(
            {
                "4k": lambda _: attention_ab._step(lib, plain, 1, out, scratch),
                "huge": lambda _: attention_ab._step(lib, huge, 1, out, scratch),
            },
            repeats,
            warmup=2,
        )
        print(_line(f"decode attention, {kv} K/V", medians), flush=True)


SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # qkv, o, gate_up, down


def _q4_weight(out_features: int, in_features: int, gen: torch.Generator) -> torch.Tensor:
    """A float weight on 4-bit block levels (16 per block of 32), as the default GGUF's."""
    import torch

    blocks = (torch.randn(out_features, in_features, generator=gen) * 0.02).view(out_features, -1, 32)
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    step = (high - low) / 15
    return (torch.round((blocks - low) / step) * step + low).view(out_features, in_features)


def linears(repeats: int) -> None:
    import torch

    from benchmarks.kernel_ab import medians_in_turn
    from tenor import hugepages
    from tenor.models import kernels

    gen = torch.Generator().manual_seed(0)
    weights = [_q4_weight(o, i, gen) for _ in range(30) for o, i in SHAPES]
    saved = hugepages.KEEP_MIN_BYTES
    hugepages.KEEP_MIN_BYTES = 1 << 62  # nothing kept: ordinary pages
    try:
        plain = [kernels.make_kernel(w, torch.float32, "int8a8") for w in weights]
    finally:
        hugepages.KEEP_MIN_BYTES = saved
    huge = [kernels.make_kernel(w, torch.float32, "int8a8") for w in weights]
    for rows in (1, 8, 32):
        xs = {i: torch.randn(rows, i, generator=gen) for _, i in SHAPES}

        def step(built, rows=rows, xs=xs):
            for kernel, weight in zip(built, weights):
                kernel(xs[weight.shape[1]])

        medians = medians_in_turn({"4k": lambda _: step(plain), "huge": lambda _: step(huge)}, repeats, warmup=3)
        print(_line(f"120 int8a8 linears, {rows} rows", medians), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--as-cpu", choices=sorted(cpu_proxy.PROFILES), help="run the code such a CPU runs")
    parser.add_argument("--kv", default="bf16,f32,int8", help="comma list of bf16, f32, int8")
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    if args.as_cpu:
        cpu_proxy.narrow_to(args.as_cpu)
    import torch

    print(f"huge pages against 4 KB pages, {torch.get_num_threads()} threads, code for {args.as_cpu or 'this CPU'}")
    attention(args.kv.split(","), args.repeats)
    linears(args.repeats)


if __name__ == "__main__":
    main()

"""A/B of tenor's paged attention kernel (tenor_paged_attention) between two versions of
tenor/csrc, in one process, each side called in turn on the same cache so that the machine's drift
touches both alike. Two workloads, the default model's shapes (9 query heads, 3 kv heads, head dim
64, blocks of 16 scattered over the cache), 30 layers each with its own cache:

- decode: 32 sequences of 190-320 cached tokens, one query row each (a 32-stream decode step; the
  30 layers' K/V, ~190 MB in bf16, come from memory);
- prompt: a prefill step of 512 tokens, three fresh prompts of 170, 190 and 152 tokens whose rows
  attend in tiles of native.ATTENTION_TILE.

    python benchmarks/attention_ab.py --base HEAD~1 [--workload decode,prompt] [--kv bf16,f32,int8]
                                      [--march haswell] [--base-tile 8]

--base is a git revision (its tenor/csrc); the other side is the working tree's. Prints each side's
median time a step (30 layers), their ratio, the GB/s of K/V read (decode) or the GFLOP/s of the
causal product (prompt), and the largest difference between the two sides' outputs.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.kernel_ab import REPO, _base_csrc, _build, medians_in_turn  # noqa: E402
from tenor import hugepages  # noqa: E402
from tenor.models import native  # noqa: E402

HEADS, KV_HEADS, DIM, BLOCK, LAYERS = 9, 3, 64, 16, 30
PROMPTS = (170, 190, 152)


@dataclass
class Workload:
    q: torch.Tensor  # [B, H, E]
    table: torch.Tensor  # [B, N]
    lengths: torch.Tensor  # [B]
    caches: list[tuple[torch.Tensor, ...]]  # per layer: k, v (and int8's scales)
    tile: int
    work: float  # bytes of K/V read (decode) or flops (prompt) a step
    unit: str


def _caches(slots: int, kv: str) -> list[tuple[torch.Tensor, ...]]:
    """Each layer's cache copied into huge pages (hugepages.keep), as the engine's cache is: in 4 KB
    pages nearly every 2 KB block costs a TLB miss, which the served cache does not pay."""
    made: list[tuple[torch.Tensor, ...]] = []
    for _ in range(LAYERS):
        if kv == "int8":
            k, v = (torch.randint(-127, 128, (KV_HEADS, slots, DIM), dtype=torch.int8) for _ in "kv")
            scales = (torch.rand(KV_HEADS, slots, 1) * 0.02 for _ in "kv")
            made.append(tuple(hugepages.keep(t) for t in (k, v, *scales)))
        else:
            dtype = torch.bfloat16 if kv == "bf16" else torch.float32
            made.append(tuple(hugepages.keep(torch.randn(KV_HEADS, slots, DIM).to(dtype)) for _ in "kv"))
    return made


def decode_workload(kv: str) -> Workload:
    lengths = torch.randint(190, 320, (32,), dtype=torch.int64)
    n = int((lengths.max() + BLOCK - 1) // BLOCK)
    blocks = 32 * n + 8
    table = torch.randperm(blocks)[: 32 * n].reshape(32, n).to(torch.int64)
    caches = _caches(blocks * BLOCK, kv)
    row_bytes = 2 * KV_HEADS * DIM * caches[0][0].element_size()
    return Workload(
        torch.randn(32, HEADS, DIM), table, lengths, caches, 1, float(lengths.sum()) * row_bytes * LAYERS, "GB/s of K/V"
    )


def prompt_workload(kv: str) -> Workload:
    widest = max(-(-p // BLOCK) for p in PROMPTS)
    blocks = torch.randperm(sum(-(-p // BLOCK) for p in PROMPTS) + 8)
    tables: list[torch.Tensor] = []
    lengths: list[int] = []
    used = 0
    for p in PROMPTS:
        own = torch.zeros(widest, dtype=torch.int64)
        own[: -(-p // BLOCK)] = blocks[used : used + -(-p // BLOCK)]
        used += -(-p // BLOCK)
        tables += [own] * p
        lengths += range(1, p + 1)
    rows = len(lengths)
    flops = float(sum(lengths)) * HEADS * DIM * 4 * LAYERS  # q.k and p.v, each row over what it sees
    return Workload(
        torch.randn(rows, HEADS, DIM),
        torch.stack(tables),
        torch.tensor(lengths, dtype=torch.int64),
        _caches(len(blocks) * BLOCK, kv),
        native.ATTENTION_TILE,
        flops,
        "GFLOP/s",
    )


def _step(lib: ctypes.CDLL, w: Workload, tile: int, out: torch.Tensor, scratch: torch.Tensor) -> None:
    batch, threads, max_len = w.q.shape[0], torch.get_num_threads(), int(w.lengths.max())
    for layer in w.caches:
        k, v = layer[0], layer[1]
        scales: list[ctypes.c_void_p | None] = [ctypes.c_void_p(t.data_ptr()) for t in layer[2:]] or [None, None]
        bits = 8 if len(layer) > 2 else native.kv_bits(k)
        lib.tenor_paged_attention(
            *(ctypes.c_void_p(t.data_ptr()) for t in (w.q, k, v)),
            *scales,
            ctypes.c_int64(bits),
            *(ctypes.c_void_p(t.data_ptr()) for t in (w.table, w.lengths, out, scratch)),
            *(ctypes.c_int64(n) for n in (batch, HEADS, KV_HEADS, DIM, w.table.shape[1], BLOCK, k.shape[1], max_len)),
            ctypes.c_float(DIM**-0.5),
            ctypes.c_int64(tile if w.tile > 1 else 1),
            ctypes.c_int64(threads),
        )


def compare(base: ctypes.CDLL, new: ctypes.CDLL, name: str, w: Workload, repeats: int, base_tile: int) -> str:
    tile = max(base_tile, w.tile)
    scratch = torch.empty(native.attention_scratch_floats(torch.get_num_threads(), tile, HEADS // KV_HEADS, 512))
    got = {side: torch.empty_like(w.q) for side in ("base", "new")}
    medians = medians_in_turn(
        {
            "base": lambda _: _step(base, w, base_tile, got["base"], scratch),
            "new": lambda _: _step(new, w, w.tile, got["new"], scratch),
        },
        repeats,
        warmup=2,
    )
    diff = (got["base"] - got["new"]).abs().max().item()
    b, n = medians["base"], medians["new"]
    return (
        f"{name}: base {b * 1e3:.2f} ms ({w.work / b / 1e9:.1f} {w.unit}), new {n * 1e3:.2f} ms "
        f"({w.work / n / 1e9:.1f}), new/base {n / b:.2f}, largest difference {diff:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD", help="git revision whose tenor/csrc is the base")
    parser.add_argument("--workload", default="decode,prompt", help="comma list of decode, prompt")
    parser.add_argument("--kv", default="bf16", help="comma list of bf16, f32, int8")
    parser.add_argument("--march", default="native", help="gcc -march for both builds, e.g. haswell")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--base-tile", type=int, default=native.ATTENTION_TILE, help="the base's prompt tile, if it had another"
    )
    args = parser.parse_args()
    workloads, kvs = args.workload.split(","), args.kv.split(",")
    if not set(workloads) <= {"decode", "prompt"} or not set(kvs) <= {"bf16", "f32", "int8"}:
        parser.error("--workload takes decode and prompt, --kv bf16, f32 and int8")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        base = _build(_base_csrc(args.base, Path(tmp)), args.march, Path(tmp) / "base.so")
        new = _build(REPO / "tenor" / "csrc", args.march, Path(tmp) / "new.so")
        threads = torch.get_num_threads()
        print(f"paged attention: base {args.base} vs the working tree, -march={args.march}, {threads} threads")
        for kv in kvs:
            for name in workloads:
                w = decode_workload(kv) if name == "decode" else prompt_workload(kv)
                print(compare(base, new, f"{name} {kv}", w, args.repeats, args.base_tile), flush=True)


if __name__ == "__main__":
    main()

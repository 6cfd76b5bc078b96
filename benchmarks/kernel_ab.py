"""A/B of tenor's block matmul kernels between two versions of tenor/csrc, in one process: each
is compiled into its own library, and the two are called in turn on the same weights, so that the
machine's drift touches both alike. --kernel block_linear (decode, up to 8 rows) or int8_gemm
(big batches: prompts, many streams; 4-bit weights take int8 x, 8-bit ones int16 x).

    python benchmarks/kernel_ab.py --base HEAD~1 [--bits 4,8] [--rows 1,4,8] [--march native]
    python benchmarks/kernel_ab.py --kernel int8_gemm --rows 32,64,512 --march haswell

--base is a git revision (its tenor/csrc, by `git archive`); the other side is the working
tree's tenor/csrc. For block_linear each shape cycles through copies of its weights that together
exceed the caches, as a decode step reads them from memory; int8_gemm reads one copy, each weight
serving dozens of rows in turn, as big batches do. Prints the median time of each side, their
ratio and the largest difference between their outputs, relative to the output's largest value.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import io
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from tenor.models import block_weights, native

REPO = Path(__file__).resolve().parent.parent
SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576))  # the default model's, OUT x IN
COPIES_BYTES = 100_000_000  # per shape: well past the last-level cache


def _build(csrc: Path, march: str, out: Path) -> ctypes.CDLL:
    flags = [f"-march={march}" if f == "-march=native" else f for f in native.FLAGS]
    subprocess.run(["gcc", *flags, "-o", str(out), *map(str, sorted(csrc.glob("*.c"))), "-lm"], check=True)
    return ctypes.CDLL(str(out))


def _base_csrc(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "tenor/csrc"], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "tenor" / "csrc"


def _weights(out_features: int, in_features: int, bits: int) -> list[tuple[torch.Tensor, ...]]:
    copies = max(1, min(30, COPIES_BYTES // (out_features * in_features)))
    made: list[tuple[torch.Tensor, ...]] = []
    for _ in range(copies):
        q, scales, mins = block_weights.quantize_u8_blocks(torch.randn(out_features, in_features) * 0.02)
        if bits == 4:
            nibbles = block_weights.nibble_blocks((q // 17) * 17, scales, mins)  # every block a Q4_1 block
            assert nibbles is not None
            made.append((nibbles.packed, nibbles.steps, nibbles.offsets))
        else:
            packed, offsets = block_weights.signed_blocks(q, scales, mins)
            made.append((packed, scales, offsets))
    return made


def _fixed_steps(lib: ctypes.CDLL) -> bool:
    """Whether a build reads 4-bit steps in fixed point (revisions before it had none that did)."""
    query = getattr(lib, "tenor_int8_gemm_fixed_steps", None)
    if query is None:
        return False
    query.restype = ctypes.c_int64
    return bool(query())


def _laid_for(lib: ctypes.CDLL, packed: block_weights.Int8GemmWeights) -> block_weights.Int8GemmWeights:
    """4-bit levels one a byte for a build from before they were read two a byte."""
    if packed.bits != 4 or hasattr(lib, "tenor_int8_gemm_nibble_levels"):
        return packed
    tiles, blocks = packed.levels.shape[:2]
    pairs = packed.levels.view(tiles, blocks, 4, 1, 32)
    spread = torch.cat([pairs & 15, pairs >> 4], dim=3).reshape(tiles, blocks, 256).contiguous()
    return dataclasses.replace(packed, levels=spread)


def _gemm_weights(out_features: int, in_features: int, bits: int, libs: dict[str, ctypes.CDLL]) -> dict[str, Weights]:
    """One weight in each build's int8_gemm layout; at many rows each is read once for dozens of
    rows, so one copy serves (from cache or not, as in serving)."""
    q, scales, mins = block_weights.quantize_u8_blocks(torch.randn(out_features, in_features) * 0.02)
    if bits == 4:
        levels = (q // 17).to(torch.uint8)
        steps = scales * 17
        packs = {name: block_weights.int8_gemm_pack(levels, steps, mins, _fixed_steps(w)) for name, w in libs.items()}
        return {name: _laid_for(libs[name], packed) for name, packed in packs.items()}
    levels, offsets = block_weights.signed_blocks(q, scales, mins)
    packed = block_weights.int8_gemm_pack(levels, scales, offsets)
    return {name: packed for name in libs}


def _call_gemm(lib: ctypes.CDLL, x: torch.Tensor, w: block_weights.Int8GemmWeights, out: torch.Tensor) -> None:
    rows, in_features = x.shape
    scratch = torch.empty(rows * in_features * w.bits // 4 + 8 * rows * (in_features // 32), dtype=torch.uint8)
    lib.tenor_int8_gemm_f32(
        *(ctypes.c_void_p(t.data_ptr()) for t in (x, w.levels)),
        ctypes.c_int64(w.bits),
        *(ctypes.c_void_p(t.data_ptr()) for t in (w.steps, w.offsets)),
        None,
        *(ctypes.c_void_p(t.data_ptr()) for t in (out, scratch)),
        *(ctypes.c_int64(n) for n in (rows, in_features, w.out_features, torch.get_num_threads())),
    )


Weights = tuple[torch.Tensor, ...] | block_weights.Int8GemmWeights


def _call(lib: ctypes.CDLL, x: torch.Tensor, weights: Weights, bits: int, out: torch.Tensor) -> None:
    if isinstance(weights, block_weights.Int8GemmWeights):
        _call_gemm(lib, x, weights, out)
        return
    packed, scales, offsets = weights
    rows, in_features = x.shape
    lib.tenor_block_linear_f32(
        *(ctypes.c_void_p(t.data_ptr()) for t in (x, packed)),
        ctypes.c_int64(bits),
        *(ctypes.c_void_p(t.data_ptr()) for t in (scales, offsets)),
        None,
        ctypes.c_void_p(out.data_ptr()),
        *(ctypes.c_int64(n) for n in (rows, in_features, out.shape[1], torch.get_num_threads())),
    )


def medians_in_turn(calls: dict[str, Callable[[int], None]], repeats: int, warmup: int = 0) -> dict[str, float]:
    """Each side's median seconds over `repeats` rounds (after `warmup` unmeasured ones), every round
    calling the sides in turn with its index, so that the machine's drift touches all alike."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(warmup + repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call(i)
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def compare(
    base: ctypes.CDLL, new: ctypes.CDLL, bits: int, rows: int, shape: tuple[int, int], repeats: int, gemm: bool
) -> str:
    out_features, in_features = shape
    libs = {"base": base, "new": new}
    copies: dict[str, list[Weights]]
    if gemm:
        copies = {name: [w] for name, w in _gemm_weights(out_features, in_features, bits, libs).items()}
    else:
        shared: list[Weights] = list(_weights(out_features, in_features, bits))
        copies = {name: shared for name in libs}
    x = torch.randn(rows, in_features)
    got = {}
    for name, lib in libs.items():
        got[name] = torch.empty(rows, out_features)
        _call(lib, x, copies[name][0], bits, got[name])
    diff = ((got["base"] - got["new"]).abs().max() / got["base"].abs().max()).item()
    medians = medians_in_turn(
        {
            "base": lambda i: _call(base, x, copies["base"][i % len(copies["base"])], bits, got["base"]),
            "new": lambda i: _call(new, x, copies["new"][i % len(copies["new"])], bits, got["new"]),
        },
        repeats,
    )
    b, n = medians["base"], medians["new"]
    return (
        f"bits {bits} {out_features}x{in_features} rows {rows}: base {b * 1e6:.0f} us, new {n * 1e6:.0f} us, "
        f"new/base {n / b:.2f}, largest difference {diff:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD", help="git revision whose tenor/csrc is the base")
    parser.add_argument("--bits", default="4", help="comma list of 4, 8")
    parser.add_argument("--kernel", choices=("block_linear", "int8_gemm"), default="block_linear")
    parser.add_argument("--rows", default="1,4,8", help="comma list, each 1..8 for block_linear")
    parser.add_argument("--march", default="native", help="gcc -march for both builds, e.g. haswell")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    bits_list = [int(b) for b in args.bits.split(",")]
    rows_list = [int(r) for r in args.rows.split(",")]
    gemm = args.kernel == "int8_gemm"
    most_rows = 1 << 16 if gemm else native.INT8_MAX_ROWS
    if not set(bits_list) <= {4, 8} or not all(1 <= r <= most_rows for r in rows_list):
        parser.error(f"--bits takes 4 and 8, --rows 1..{most_rows}")
    with tempfile.TemporaryDirectory() as tmp:
        base = _build(_base_csrc(args.base, Path(tmp)), args.march, Path(tmp) / "base.so")
        new = _build(REPO / "tenor" / "csrc", args.march, Path(tmp) / "new.so")
        threads = torch.get_num_threads()
        print(f"{args.kernel}: base {args.base} vs the working tree, -march={args.march}, {threads} threads")
        for bits in bits_list:
            for shape in SHAPES:
                for rows in rows_list:
                    print(compare(base, new, bits, rows, shape, args.repeats, gemm), flush=True)


if __name__ == "__main__":
    main()

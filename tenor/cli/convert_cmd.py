"""`tenor convert SRC DST`: a tenor checkpoint from an HF directory, a GGUF file or another
tenor checkpoint (see tenor.checkpoints.convert)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert an HF model directory or GGUF file into a tenor checkpoint",
        description="Write SRC (HF model directory, .gguf file or tenor checkpoint) as a committed "
        "tenor checkpoint at DST, which must not exist.",
    )
    p.add_argument("src", metavar="SRC", help="HF model directory, .gguf file or tenor checkpoint")
    p.add_argument("dst", metavar="DST", help="new checkpoint directory (must not exist)")
    p.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="dtype of the float tensors (default: keep the source's; GGUF imports are float32)",
    )
    p.add_argument(
        "--quantize",
        choices=["int8"],
        default=None,
        help="int8 weight-only quantization of the linear layers (per-channel scales)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tenor.checkpoints.convert import convert  # torch and friends load only when converting

    dst = convert(args.src, args.dst, dtype=args.dtype, quantize=args.quantize, progress=not args.no_progress)
    print(f"wrote {dst}")
    return 0

"""The `--device` flag `tenor serve` and `tenor generate` share (the model server's `--platform`
names its device the same way)."""

from __future__ import annotations

import argparse

from tenor.errors import UserError
from tenor.hardware import DEVICE_CHOICES, resolve_device


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="where the model runs: auto (the default: cuda where torch sees a GPU, else cpu), cpu, cuda",
    )


def device_from(name: str, flag: str = "--device") -> str:
    """cpu or cuda; a one-line error for cuda on a machine without one."""
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise UserError(f"{flag} {name}: {exc}") from None

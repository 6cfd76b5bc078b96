"""`tenor bench`: the serving benchmark against any OpenAI-compatible server."""

from __future__ import annotations

import argparse

from tenor.bench import serving


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible server (throughput, TTFT, TPOT, ITL)",
        description="Stream a fixed, seeded prompt set at --base-url and report vLLM-style serving metrics.",
    )
    serving.add_arguments(parser)
    parser.set_defaults(func=serving.run_from_args)

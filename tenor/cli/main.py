"""The `tenor` command. Each command group lives in its own module with a
`register(subparsers)` function that adds its verbs; flags are parsed only here."""

from __future__ import annotations

import argparse
import importlib
import sys

from tenor.engine.api import EngineError
from tenor.errors import UserError

# One module per command group, in the order `tenor --help` lists them.
COMMAND_MODULES = (
    "tenor.cli.serve_cmd",  # serve
    "tenor.cli.generate_cmd",  # generate
    "tenor.cli.convert_cmd",  # convert
    "tenor.cli.admin_cmd",  # admin serve
    "tenor.cli.model_server_cmd",  # model-server serve
    "tenor.cli.cell_cmd",  # publish, unpublish, update, ls, watch
    "tenor.cli.lm_cmd",  # lm.generate, lm.score
    "tenor.cli.token_cmd",  # token rotate
    "tenor.cli.bench_cmd",  # bench
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tenor", description="Serve large language models.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, EngineError, ValueError, FileNotFoundError) as exc:
        print(f"tenor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

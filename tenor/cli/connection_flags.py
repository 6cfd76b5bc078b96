"""The HTTP connection-limit flags `tenor serve` and `tenor model-server serve` share."""

from __future__ import annotations

import argparse

from tenor.server.http.connection_limits import ConnectionLimits

_DEFAULTS = ConnectionLimits()


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=_DEFAULTS.header_timeout_s,
        metavar="S",
        help=f"seconds a request line and headers may take to arrive (default {_DEFAULTS.header_timeout_s:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=_DEFAULTS.body_timeout_s,
        metavar="S",
        help=f"seconds a request body may take to arrive; then 408 (default {_DEFAULTS.body_timeout_s:g})",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=_DEFAULTS.keep_alive_timeout_s,
        metavar="S",
        help=f"seconds an idle connection stays open (default {_DEFAULTS.keep_alive_timeout_s:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=_DEFAULTS.max_connections,
        metavar="N",
        help=f"open connections; more get 503 and are closed (default {_DEFAULTS.max_connections})",
    )
    parser.add_argument(
        "--max-header-bytes",
        type=int,
        default=_DEFAULTS.max_header_bytes,
        metavar="N",
        help=f"largest request head; larger gets 400 (default {_DEFAULTS.max_header_bytes})",
    )


def connection_limits_from(args: argparse.Namespace) -> ConnectionLimits:
    """ValueError (one line, exit 2) for a bad value, naming the flag."""
    try:
        return ConnectionLimits(
            args.header_timeout, args.body_timeout, args.keep_alive_timeout, args.max_connections, args.max_header_bytes
        )
    except ValueError as exc:
        flag = str(exc).split(" ", 1)[0].removesuffix("_s").replace("_timeout", "-timeout").replace("_", "-")
        raise ValueError(f"--{flag}: {exc}") from None

"""`tenor admin serve`: an admin server for a cell (any number may run; one leads)."""

from __future__ import annotations

import argparse
import asyncio
import logging

from tenor.admin.manager import ManagerOptions
from tenor.admin.naming import parse_cell_name
from tenor.admin.store import ROOT_ENV, resolve_root
from tenor.cli.credential_flags import add_credential_flags, credentials_from


def register(subparsers: argparse._SubParsersAction) -> None:
    admin = subparsers.add_parser("admin", help="run a cell's admin server")
    verbs = admin.add_subparsers(dest="admin_command", metavar="VERB", required=True)
    serve = verbs.add_parser("serve", help="serve the Admin gRPC service; campaign to lead the cell")
    serve.add_argument("--cell", required=True, help="the cell, /tenor/<cell>")
    serve.add_argument("--root", help=f"cell root: file://DIR or etcd://HOST:PORT[/prefix] (default ${ROOT_ENV})")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="gRPC port (default: any free port)")
    serve.add_argument("--http-port", type=int, default=0, help="status page port (default: any free port; -1: none)")
    serve.add_argument("--poll-interval", type=float, default=1.0, help="seconds between model-server heartbeats")
    serve.add_argument("--prune-after", type=float, default=10.0, help="drop a server silent for this many seconds")
    serve.add_argument(
        "--startup-grace",
        type=float,
        default=2.0,
        help="after taking the lead, seconds to let servers re-join before placing replicas",
    )
    serve.add_argument("--max-load-attempts", type=int, default=3, help="failed loads per model before giving up")
    serve.add_argument("--election-retry", type=float, default=0.5, help="seconds between a standby's tries")
    serve.add_argument("--etcd-ttl", type=int, default=None, help="leader lease TTL in seconds (etcd roots)")
    serve.add_argument("--log-level", default="WARNING", help="Python logging level (default WARNING)")
    serve.add_argument(
        "--open-read-only",
        action="store_true",
        help="answer List, Stats, WatchLoc and WaitForReady without the cell token "
        "(publish, update, unpublish and join always need it)",
    )
    add_credential_flags(serve)
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from tenor.admin.admin_server import AdminServerOptions, serve  # grpc loads only when serving

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    manager = ManagerOptions(
        poll_interval_s=args.poll_interval,
        prune_after_s=args.prune_after,
        rpc_timeout_s=min(1.0, args.prune_after),
        max_load_attempts=args.max_load_attempts,
        startup_grace_s=args.startup_grace,
    )
    if args.etcd_ttl is not None and args.etcd_ttl < 1:
        raise ValueError(f"--etcd-ttl must be >= 1 second, got {args.etcd_ttl}")
    options = AdminServerOptions(
        cell=parse_cell_name(args.cell),
        root=resolve_root(args.root),
        host=args.host,
        port=args.port,
        http_port=None if args.http_port < 0 else args.http_port,
        election_retry_s=args.election_retry,
        etcd_ttl_s=args.etcd_ttl,
        manager=manager,
        credentials=credentials_from(args),
        open_read_only=args.open_read_only,
    )
    asyncio.run(serve(options))
    return 0

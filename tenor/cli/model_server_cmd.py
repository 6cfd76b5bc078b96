"""`tenor model-server serve`: a model server that joins a cell and serves what the admin assigns.

    tenor model-server serve --cell /tenor/<cell> --root ROOT [--port P] [--http-port P]
                             [--platform cpu|cuda] [--tags a,b] [--memory 8G] [--configs a,b]
"""

from __future__ import annotations

import argparse
import logging
import re

from tenor.errors import UserError

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]i?B?|B)?$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("model-server", help="run a model server that joins a cell")
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    serve = verbs.add_parser("serve", help="join a cell and serve the models its admin assigns here")
    serve.add_argument("--cell", required=True, help="/tenor/<cell>")
    serve.add_argument("--root", help="cell root, file://DIR or etcd://HOST:PORT[/prefix] (default: $TENOR_ROOT)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="gRPC port (Modelet + LM); default: any free port")
    serve.add_argument("--http-port", type=int, default=None,
                       help="also serve HTTP (/healthcheck, /metrics, /models/<model>/...) on this port; 0: any")
    serve.add_argument("--platform", default="cpu", choices=("cpu", "cuda"))
    serve.add_argument("--tags", default="", help="comma-separated tags for placement constraints")
    serve.add_argument("--memory", default="", help="memory models may use, e.g. 8G (default: this machine's RAM)")
    serve.add_argument("--configs", default="", help="comma-separated servable configs offered (default: all)")
    serve.add_argument("--rejoin-interval", type=float, default=2.0, metavar="S",
                       help="seconds between Joins to the admin (default 2)")
    serve.add_argument("--drain-timeout", type=float, default=5.0, metavar="S",
                       help="seconds in-flight requests get when a model is unloaded (default 5)")
    serve.add_argument("--prefill-from", default="", metavar="HOST:PORT,...",
                       help="decode role: prefill prompts on these model servers and decode here "
                            "(disaggregated serving; default: prefill locally)")
    serve.set_defaults(func=_serve)


def parse_size(text: str) -> int:
    """Bytes from "8G", "512MiB", "1000000" (binary units)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise UserError(f"bad size {text!r}: use bytes or a number with K, M, G or T, e.g. 8G")
    unit = (match.group(2) or "").upper()[:1]
    return int(float(match.group(1)) * _UNITS[unit])


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _prefill_targets(text: str) -> tuple[str, ...]:
    targets = _split(text)
    for target in targets:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"bad --prefill-from address {target!r}: use HOST:PORT")
    return targets


def _serve(args: argparse.Namespace) -> int:
    from tenor import registry
    from tenor.admin.naming import parse_cell_name
    from tenor.client.admin_client import resolve_root
    from tenor.server.model_server import ModelServerConfig, serve

    cell = str(parse_cell_name(args.cell))
    configs = _split(args.configs)
    for name in configs:
        registry.get(name)  # an unknown config is a one-line error now, not a silent mismatch later
    config = ModelServerConfig(
        cell=cell,
        root=resolve_root(args.root),
        host=args.host,
        port=args.port,
        http_port=args.http_port,
        platform=args.platform,
        tags=_split(args.tags),
        memory_bytes=parse_size(args.memory) if args.memory else 0,
        servable_configs=configs,
        rejoin_s=args.rejoin_interval,
        drain_timeout_s=args.drain_timeout,
        prefill_targets=_prefill_targets(args.prefill_from),
    )
    # tenor's own lines (model status changes) at INFO; libraries (httpx to etcd...) only when they warn.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tenor").setLevel(logging.INFO)
    serve(config)
    return 0

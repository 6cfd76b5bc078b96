"""`tenor model-server serve`: a model server that joins a cell and serves what the admin assigns.

    tenor model-server serve --cell /tenor/<cell> --root ROOT [--port P] [--http-port P]
                             [--platform cpu|cuda] [--tags a,b] [--memory 8G] [--configs a,b]
                             [--group-size N --group-rank R --group-leader HOST:PORT]

A model-server group (tensor parallelism over N processes/hosts): rank 0 joins the cell and
serves; ranks 1..N-1 hold their shards and run the leader's steps. Without the flags, the
values come from LeaderWorkerSet's LWS_GROUP_SIZE, LWS_WORKER_INDEX and LWS_LEADER_ADDRESS.
"""

from __future__ import annotations

import argparse
import logging
import re

from tenor.cli.connection_flags import add_connection_flags, connection_limits_from
from tenor.cli.credential_flags import add_credential_flags, credentials_from
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
    serve.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="also serve HTTP (/healthcheck, /metrics, /models/<model>/...) on this port; 0: any",
    )
    serve.add_argument("--platform", default="cpu", choices=("cpu", "cuda"))
    serve.add_argument("--tags", default="", help="comma-separated tags for placement constraints")
    serve.add_argument("--memory", default="", help="memory models may use, e.g. 8G (default: this machine's RAM)")
    serve.add_argument("--configs", default="", help="comma-separated servable configs offered (default: all)")
    serve.add_argument(
        "--rejoin-interval", type=float, default=2.0, metavar="S", help="seconds between Joins to the admin (default 2)"
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds in-flight requests get when a model is unloaded (default 5)",
    )
    add_credential_flags(serve)
    add_connection_flags(serve)
    serve.add_argument(
        "--group-size",
        type=int,
        default=None,
        metavar="N",
        help="ranks in this server's model-server group (default: $LWS_GROUP_SIZE, else 1)",
    )
    serve.add_argument(
        "--group-rank",
        type=int,
        default=None,
        metavar="R",
        help="this process's rank, 0 = the leader that joins the cell (default: $LWS_WORKER_INDEX)",
    )
    serve.add_argument(
        "--group-leader",
        default=None,
        metavar="HOST:PORT",
        help="where rank 0 forms the group (default: $LWS_LEADER_ADDRESS, port 29500)",
    )
    serve.add_argument(
        "--group-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a collective may wait for a peer before the group counts as broken (default 10)",
    )
    serve.add_argument(
        "--group-join-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds to wait for every rank to join and load (default 300)",
    )
    serve.add_argument(
        "--prefill-from",
        default="",
        metavar="HOST:PORT,...",
        help="manual decode role: every model not placed here as prefill decodes here, prefilling "
        "on these model servers (default: as the admin places it; see `tenor publish ... "
        "disaggregated=true`)",
    )
    serve.set_defaults(func=_serve)


def parse_size(text: str) -> int:
    """Bytes from "8G", "512MiB", "1000000" (binary units)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise UserError(f"bad size {text!r}: use bytes or a number with K, M, G or T, e.g. 8G")
    unit = (match.group(2) or "").upper()[:1]
    return int(float(match.group(1)) * _UNITS[unit])


def _memory(text: str, group_size: int) -> int:
    """What models may fill: a group offers the memory of all its hosts (0: this machine's RAM)."""
    if group_size == 1:
        return parse_size(text) if text else 0
    from tenor.server.model_server import machine_memory_bytes

    return (parse_size(text) if text else machine_memory_bytes()) * group_size


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
    from tenor.cli.device_flag import device_from
    from tenor.client.admin_client import resolve_root
    from tenor.dist.spec import spec_from_env
    from tenor.server.model_server import ModelServerConfig, serve

    device = device_from(args.platform, "--platform")  # the platform it joins the cell as is where it computes
    try:
        group = spec_from_env(
            args.group_size,
            args.group_rank,
            args.group_leader,
            timeout_s=args.group_timeout,
            join_timeout_s=args.group_join_timeout,
            device=device,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if group is not None and not group.is_leader:
        from tenor.dist.worker import serve_worker

        print(
            f"model-server group worker: rank {group.rank} of {group.size}, leader "
            f"{group.leader_host}:{group.leader_port}",
            flush=True,
        )
        return serve_worker(group)  # GroupError (cannot join): a one-line error from main
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
        memory_bytes=_memory(args.memory, group.size if group else 1),
        servable_configs=configs,
        rejoin_s=args.rejoin_interval,
        drain_timeout_s=args.drain_timeout,
        credentials=credentials_from(args),
        http_limits=connection_limits_from(args),
        group=group,
        prefill_targets=_prefill_targets(args.prefill_from),
    )
    # tenor's own lines (model status changes) at INFO; libraries (httpx to etcd...) only when they warn.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tenor").setLevel(logging.INFO)
    return serve(config)

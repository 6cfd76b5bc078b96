"""saxutil's cell verbs: publish, unpublish, update, ls, watch.

tenor publish /tenor/<cell>/<model> <config> <checkpoint|None> <replicas> [key=value ...]
    (disaggregated=true prefill_replicas=P decode_replicas=D: P + D = replicas)
tenor unpublish /tenor/<cell>/<model>
tenor update /tenor/<cell>/<model> [--replicas N] [--checkpoint PATH|None] [key=value ...]
tenor ls [/tenor/<cell>[/<model>]]
tenor watch /tenor/<cell>/<model>
"""

from __future__ import annotations

import argparse
import sys

from tenor.admin.naming import ModelName, parse_model_name, parse_name
from tenor.admin.roles import check_replicas, check_role_values, role_counts
from tenor.admin.store import ROOT_ENV, list_cells, resolve_root
from tenor.cli.credential_flags import add_credential_flags, credentials_from
from tenor.errors import UserError

DEFAULT_TIMEOUT_S = 60.0


def register(subparsers: argparse._SubParsersAction) -> None:
    publish = _verb(subparsers, "publish", "publish a model to a cell", _publish)
    publish.add_argument("model", metavar="MODEL", help="/tenor/<cell>/<model>")
    publish.add_argument("config", metavar="CONFIG", help="servable config, e.g. test.TinyLlamaRandom")
    publish.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint path, or None")
    publish.add_argument("replicas", metavar="REPLICAS", help="number of replicas (>= 0)")
    publish.add_argument(
        "overrides",
        metavar="KEY=VALUE",
        nargs="*",
        help="config overrides (JSON values); ram=BYTES and constraints=TAG,.. steer placement; "
        "disaggregated=true prefill_replicas=P decode_replicas=D (P + D = REPLICAS) places "
        "prefill and decode replicas",
    )

    unpublish = _verb(subparsers, "unpublish", "unpublish a model", _unpublish)
    unpublish.add_argument("model", metavar="MODEL")

    update = _verb(subparsers, "update", "change a published model's replicas, checkpoint or overrides", _update)
    update.add_argument("model", metavar="MODEL")
    update.add_argument("--replicas", help="new replica count (serving replicas are not reloaded)")
    update.add_argument("--checkpoint", help="new checkpoint path, or None (reloads replicas one at a time)")
    update.add_argument("overrides", metavar="KEY=VALUE", nargs="*", help="overrides to set; KEY= removes one")

    ls = _verb(subparsers, "ls", "list cells, a cell's models, or a model's replicas", _ls)
    ls.add_argument("name", metavar="NAME", nargs="?", default="", help="/tenor/<cell> or /tenor/<cell>/<model>")

    watch = _verb(subparsers, "watch", "print a model's replica addresses as they change", _watch)
    watch.add_argument("model", metavar="MODEL")
    watch.add_argument("--updates", type=int, default=0, help="exit after this many updates (default: run until ^C)")


def _verb(subparsers: argparse._SubParsersAction, name: str, help_text: str, func) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help_text)
    parser.add_argument("--root", help=f"cell root: file://DIR or etcd://HOST:PORT[/prefix] (default ${ROOT_ENV})")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to find the admin and get an answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    add_credential_flags(parser)
    parser.set_defaults(func=func)
    return parser


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"overrides must look like key=value, got {pair!r}")
        if key in overrides:
            raise UserError(f"override {key} given twice")
        overrides[key] = value
    return overrides


def parse_replicas(text: str) -> int:
    try:
        replicas = int(text)
    except ValueError:
        raise UserError(f"replica count must be a whole number, got {text!r}") from None
    if replicas < 0:
        raise UserError(f"replica count must be >= 0, got {replicas}")
    return replicas


def _checkpoint(text: str) -> str:
    return "" if text == "None" else text


def _client(args: argparse.Namespace, name: ModelName):
    from tenor.client.admin_client import AdminClient  # grpc loads only for verbs that talk to the admin

    return AdminClient(
        resolve_root(args.root), name.cell_name, timeout_s=args.timeout, credentials=credentials_from(args)
    )


def _publish(args: argparse.Namespace) -> int:
    name = parse_model_name(args.model)
    replicas = parse_replicas(args.replicas)
    overrides = parse_overrides(args.overrides)
    check_replicas(role_counts(overrides), replicas)  # before dialling: a bad split is a one-line error here
    client = _client(args, name)
    try:
        client.publish(str(name), args.config, _checkpoint(args.checkpoint) or None, replicas, overrides)
    finally:
        client.close()
    return 0


def _unpublish(args: argparse.Namespace) -> int:
    name = parse_model_name(args.model)
    client = _client(args, name)
    try:
        client.unpublish(str(name))
    finally:
        client.close()
    return 0


def _update(args: argparse.Namespace) -> int:
    name = parse_model_name(args.model)
    replicas = None if args.replicas is None else parse_replicas(args.replicas)
    overrides = parse_overrides(args.overrides)
    check_role_values(overrides)
    if replicas is None and args.checkpoint is None and not overrides:
        raise UserError("nothing to update: give --replicas, --checkpoint or key=value overrides")
    checkpoint = None if args.checkpoint is None else _checkpoint(args.checkpoint)
    client = _client(args, name)
    try:
        client.update(str(name), replicas=replicas, checkpoint=checkpoint, overrides=overrides)
    finally:
        client.close()
    return 0


def _ls(args: argparse.Namespace) -> int:
    from tenor.cli.table import render_table

    if not args.name:
        cells = list_cells(resolve_root(args.root))
        print(render_table(["#", "cell"], [[str(i), str(c)] for i, c in enumerate(cells)], right_aligned=[0]))
        return 0
    name = parse_name(args.name)
    from tenor.client.admin_client import AdminClient

    cell = name.cell_name if isinstance(name, ModelName) else name
    client = AdminClient(resolve_root(args.root), cell, timeout_s=args.timeout, credentials=credentials_from(args))
    try:
        models = client.list(str(name))
        groups = (
            {s.address: s.spec.group_size for s in client.stats().servers if s.spec.group_size > 1}
            if isinstance(name, ModelName)
            else {}
        )
    finally:
        client.close()
    if not isinstance(name, ModelName):
        rows = [[str(i), parse_model_name(m.model.model_name).model] for i, m in enumerate(models)]
        print(render_table(["#", "model id"], rows, right_aligned=[0]))
        return 0
    (model,) = models
    spec = model.model
    # Interleaved replicas ("both") are listed bare; prefill and decode replicas say so.
    roles = {r.address: r.role for r in model.replicas if r.role and r.role != "both"}
    print(
        render_table(
            ["model", "model path", "checkpoint path", "# of replicas", "replica addresses"],
            [
                [
                    name.model,
                    spec.config_name,
                    spec.checkpoint or "None",
                    str(len(model.addresses)),
                    "\n".join(
                        a
                        + (f" ({roles[a]})" if a in roles else "")
                        + (f" (group of {groups[a]})" if a in groups else "")
                        for a in model.addresses
                    ),
                ]
            ],
        )
    )
    if len(model.addresses) < spec.requested_replicas or model.failure_reason:
        print(f"requested {spec.requested_replicas} replica(s), {len(model.addresses)} serving")
        for replica in model.replicas:
            if replica.address not in model.addresses:
                from tenor.proto import common_pb2

                reason = f": {replica.failure_reason}" if replica.failure_reason else ""
                role = f" ({roles[replica.address]})" if replica.address in roles else ""
                print(f"  {replica.address}{role}: {common_pb2.ModelStatus.Name(replica.status)}{reason}")
        if model.shortfall:
            print(f"  {model.shortfall}")
        if model.failure_reason:
            print(f"  last load failure: {model.failure_reason}" + (" (gave up)" if model.gave_up else ""))
    return 0


def _watch(args: argparse.Namespace) -> int:
    name = parse_model_name(args.model)
    client = _client(args, name)
    watch = client.watch_loc(str(name))
    seen = 0
    try:
        for update in watch:
            if update.reset:
                print("Reset")
                lines = [f"+ {a}" for a in update.addresses]
            else:
                lines = [f"+ {a}" for a in update.added] + [f"- {a}" for a in update.removed]
            for line in lines:
                print(line)
            sys.stdout.flush()
            seen += 1
            if args.updates and seen >= args.updates:
                break
    finally:
        watch.close()
        client.close()
    return 0

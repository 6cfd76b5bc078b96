"""`tenor token rotate`: replace a cell's token in its root without dropping a call.

Every process re-reads the root's token every second (tenor.auth.tokens.RELOAD_S), so the
rotation writes three token texts, `--grace` seconds apart: accept the new token everywhere
(old one still sent), send the new one everywhere (old one still accepted), then drop the old.
Processes given the token by --token-file follow the same three edits of their file;
processes given TENOR_TOKEN must be restarted.
"""

from __future__ import annotations

import argparse
import time

from tenor.admin.naming import parse_cell_name
from tenor.admin.store import ROOT_ENV, StoreError, open_store, resolve_root
from tenor.auth.tokens import RELOAD_S, TokenSet, new_token, rotation_steps
from tenor.errors import UserError

DEFAULT_GRACE_S = 3 * RELOAD_S


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("token", help="manage a cell's token")
    verbs = group.add_subparsers(dest="token_command", metavar="VERB", required=True)
    rotate = verbs.add_parser("rotate", help="replace the cell token in the root; serving goes on")
    rotate.add_argument("--cell", required=True, help="/tenor/<cell>")
    rotate.add_argument("--root", help=f"cell root: file://DIR or etcd://HOST:PORT[/prefix] (default ${ROOT_ENV})")
    rotate.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help=f"seconds between the three steps; > {RELOAD_S:g} (default {DEFAULT_GRACE_S:g})",
    )
    rotate.set_defaults(func=_rotate)


def _rotate(args: argparse.Namespace) -> int:
    if not args.grace > RELOAD_S:
        raise UserError(
            f"--grace must be more than {RELOAD_S:g} s (how often servers re-read the token), got {args.grace}"
        )
    store = open_store(resolve_root(args.root), parse_cell_name(args.cell))
    try:
        text = store.read_token()
        if text is None:
            raise UserError(f"{args.cell} has no token in {store.root} yet: start an admin server first")
        steps = rotation_steps(TokenSet.parse(text, f"the token in {store.root}"), new_token())
        for i, step in enumerate(steps):
            if i:
                time.sleep(args.grace)
            store.write_token(step.to_text())
    except StoreError as exc:
        raise UserError(str(exc)) from None
    finally:
        store.close()
    print(f"tenor: rotated the token of {args.cell}", flush=True)
    return 0

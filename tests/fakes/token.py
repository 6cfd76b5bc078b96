"""The cell token a test's root holds, for tests that call a server's RPCs by hand."""

from __future__ import annotations

from tenor.admin.naming import parse_cell_name
from tenor.admin.store import open_store
from tenor.auth.tokens import TokenSet


def cell_token(root: str, cell: str = "/tenor/test") -> str:
    store = open_store(root, parse_cell_name(cell))
    try:
        text = store.read_token()
    finally:
        store.close()
    assert text, f"no cell token in {root} yet"
    sending = TokenSet.parse(text, root).sending
    assert sending is not None
    return sending


def bearer(root: str, cell: str = "/tenor/test") -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {cell_token(root, cell)}")]

"""Token ids as text, for tokenized models (SAX's format: "21106,318,281")."""

from __future__ import annotations

import operator
from typing import Sequence

from tenor.errors import UserError

MAX_TOKEN_ID = 2**31 - 1
_SHOWN = 20  # how much of a bad item an error message quotes


def parse_token_ids(text: str) -> list[int]:
    """Comma-separated non-negative integers; spaces around items are fine."""
    if not isinstance(text, str):
        raise UserError(f"token ids must be a string like '21106,318,281', got {type(text).__name__}")
    if not text.strip():
        raise UserError("token ids are empty; expected comma-separated integers like '21106,318,281'")
    ids = []
    for position, item in enumerate(text.split(",")):
        item = item.strip()
        # isdecimal also accepts non-ASCII digits (e.g. Arabic-Indic); ids are ASCII only.
        if not (item.isascii() and item.isdecimal()):
            shown = item if len(item) <= _SHOWN else item[:_SHOWN] + "..."
            what = "an empty item" if not item else f"{shown!r}"
            raise UserError(
                f"token ids: item {position} is {what}; expected a non-negative integer (format: '21106,318,281')"
            )
        value = int(item)
        if value > MAX_TOKEN_ID:
            raise UserError(f"token ids: item {position} ({item[:_SHOWN]}) is larger than {MAX_TOKEN_ID}")
        ids.append(value)
    return ids


def format_token_ids(token_ids: Sequence[int]) -> str:
    """The inverse of parse_token_ids."""
    ids = []
    for i in token_ids:
        try:
            value = operator.index(i)  # ints, numpy and torch integers; not floats or strings
        except TypeError:
            value = -1
        if isinstance(i, bool) or not 0 <= value <= MAX_TOKEN_ID:
            raise UserError(f"token ids must be integers in [0, {MAX_TOKEN_ID}], got {i!r}")
        ids.append(value)
    return ",".join(map(str, ids))

from __future__ import annotations

import pytest

from tenor.errors import UserError
from tenor.tokenizer import format_token_ids, parse_token_ids
from tenor.tokenizer.token_ids import MAX_TOKEN_ID


def test_parse_and_format():
    assert parse_token_ids("21106,318,281") == [21106, 318, 281]
    assert parse_token_ids(" 21106 , 318,281 ") == [21106, 318, 281]
    assert parse_token_ids("0") == [0]
    assert format_token_ids([21106, 318, 281]) == "21106,318,281"
    assert format_token_ids([]) == ""
    import numpy as np

    assert format_token_ids(np.array([7, 8])) == "7,8"
    ids = [0, 1, 49151, MAX_TOKEN_ID]
    assert parse_token_ids(format_token_ids(ids)) == ids


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("1,,2", "item 1 is an empty item"),
        ("1,2,", "item 2 is an empty item"),
        ("1,-2", "item 1 is '-2'"),
        ("1.5", "item 0 is '1.5'"),
        ("abc", "item 0 is 'abc'"),
        ("+3", "item 0 is '+3'"),
        ("1 2", "item 0 is '1 2'"),
        ("١٢", "item 0"),  # Arabic-Indic digits
        (f"{MAX_TOKEN_ID + 1}", "larger than"),
        ("x" * 500, "..."),
    ],
)
def test_parse_rejects_junk_with_one_line(text, fragment):
    with pytest.raises(UserError) as info:
        parse_token_ids(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message and len(message) < 200


@pytest.mark.parametrize("bad", [[-1], [1.0], [True], ["3"], [MAX_TOKEN_ID + 1]])
def test_format_rejects_non_ids(bad):
    with pytest.raises(UserError):
        format_token_ids(bad)


def test_parse_rejects_non_strings():
    with pytest.raises(UserError, match="must be a string"):
        parse_token_ids([1, 2])  # type: ignore[arg-type]

from __future__ import annotations

import pytest

from tenor.admin.naming import CellName, ModelName, parse_cell_name, parse_model_name, parse_name
from tenor.errors import UserError

GOOD = {
    "/tenor/c/m": ModelName("c", "m"),
    "/tenor/my-cell/lm_2.v1": ModelName("my-cell", "lm_2.v1"),
    "/tenor/" + "c" * 63 + "/m": ModelName("c" * 63, "m"),
}
BAD_MODELS = {
    "": "expected /tenor/<cell>/<model>",
    "tenor/c/m": "expected /tenor/<cell>/<model>",
    "/sax/c/m": "expected /tenor/<cell>/<model>",
    "/tenor/c": "expected /tenor/<cell>/<model>",
    "/tenor/c/m/x": "expected /tenor/<cell>/<model>",
    "/tenor//m": "bad cell name ''",
    "/tenor/c/": "bad model name ''",
    "/tenor/c/..": "bad model name '..'",
    "/tenor/c/a..b": "bad model name 'a..b'",
    "/tenor/c/-m": "bad model name '-m'",
    "/tenor/c/m n": "bad model name 'm n'",
    "/tenor/" + "c" * 64 + "/m": "bad cell name",
}


@pytest.mark.parametrize("text", sorted(GOOD))
def test_parse_model_name(text: str) -> None:
    name = parse_model_name(text)
    assert name == GOOD[text]
    assert str(name) == text
    assert str(name.cell_name) == text.rsplit("/", 1)[0]


@pytest.mark.parametrize("text", sorted(BAD_MODELS))
def test_bad_model_names_say_why_in_one_line(text: str) -> None:
    with pytest.raises(UserError, match=".*") as info:
        parse_model_name(text)
    message = str(info.value)
    assert BAD_MODELS[text] in message and "\n" not in message


def test_parse_cell_and_either() -> None:
    assert parse_cell_name("/tenor/c") == CellName("c")
    assert str(CellName("c")) == "/tenor/c"
    assert parse_name("/tenor/c") == CellName("c")
    assert parse_name("/tenor/c/m") == ModelName("c", "m")
    with pytest.raises(UserError, match="expected /tenor/<cell>$"):
        parse_cell_name("/tenor/c/m")
    with pytest.raises(UserError, match="or /tenor/<cell>/<model>"):
        parse_name("/x")

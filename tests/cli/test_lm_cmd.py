"""`tenor lm.generate` / `tenor lm.score`: output shapes, --extra parsing and one-line errors.

The commands run through tenor.cli.main against an in-process LM server (MockEngine) named
with --addresses; going through the admin is covered by tests/integration.
"""

from __future__ import annotations

import pytest

from tenor.cli.lm_cmd import generate_table, parse_extra
from tenor.cli.main import main
from tenor.cli.table import render_table
from tenor.client import Sample
from tenor.errors import UserError
from tests.server.lm_servers import LMServerThread

MODEL = "/tenor/test/lm"


@pytest.fixture(scope="module")
def server():
    with LMServerThread([MODEL]) as s:
        yield s


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_prints_the_saxutil_table(server, capsys):
    code, out, err = run_cli(
        capsys, "lm.generate", "--addresses", server.address, "--extra", "per_example_max_decode_steps:4", MODEL, "abc"
    )
    assert (code, err) == (0, "")
    assert out == (
        "+----------+-------+\n| GENERATE | SCORE |\n+----------+-------+\n| defg     |    -2 |\n+----------+-------+\n"
    )


def test_generate_n_samples(server, capsys):
    code, out, _ = run_cli(
        capsys,
        "lm.generate",
        "-n",
        "3",
        "--addresses",
        server.address,
        "--extra",
        "per_example_max_decode_steps:2",
        MODEL,
        "a",
    )
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ") and "GENERATE" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["bc", "cd", "de"]


def test_generate_stream_prints_text_then_score(server, capsys):
    code, out, _ = run_cli(
        capsys,
        "lm.generate",
        "--stream",
        "--addresses",
        server.address,
        "--extra",
        "per_example_max_decode_steps:4",
        MODEL,
        "abc",
    )
    assert code == 0
    assert out == "defg\n\nScore: -2\n"


def test_generate_stream_several_samples(server, capsys):
    code, out, _ = run_cli(
        capsys,
        "lm.generate",
        "--stream",
        "-n",
        "2",
        "--addresses",
        server.address,
        "--extra",
        "per_example_max_decode_steps:2",
        MODEL,
        "a",
    )
    assert code == 0
    assert out == "bc\n\ncd\n\nScores: -1, -1\n"


def test_score_prints_suffix_table(server, capsys):
    code, out, _ = run_cli(capsys, "lm.score", "--addresses", server.address, MODEL, "ab", "c", "de")
    assert code == 0
    assert out.splitlines()[1] == "| SUFFIX | SCORE |"
    assert out.splitlines()[3:5] == ["| c      | -0.25 |", "| de     |  -0.5 |"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["lm.generate", "--extra", "temprature:0.5", MODEL, "abc"], "unknown extra input(s) temprature"),
        (["lm.generate", "--extra", "temperature=0.5", MODEL, "abc"], "key:value"),
        (["lm.generate", "-n", "0", MODEL, "abc"], "-n must be at least 1"),
        (["lm.generate", "-n", "17", MODEL, "abc"], "n must be"),
        (["lm.generate", "tenor/test/lm", "abc"], "bad model name"),
        (["lm.generate", "--timeout", "0", MODEL, "abc"], "--timeout"),
        (["lm.score", MODEL, "ab", ""], "empty"),
    ],
)
def test_bad_input_is_one_line_exit_2(server, capsys, argv, words):
    code, out, err = run_cli(capsys, *argv[:1], "--addresses", server.address, *argv[1:])
    assert code == 2 and out == ""
    assert err.startswith("tenor: error: ") and words in err and err.count("\n") == 1


def test_no_root_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.delenv("TENOR_ROOT", raising=False)
    code, _, err = run_cli(capsys, "lm.generate", MODEL, "abc")
    assert code == 2 and err.startswith("tenor: error: ") and err.count("\n") == 1


def test_parse_extra_follows_saxutil():
    assert parse_extra("temperature:0.5,seed:3,mode:'fast',name:abc") == {
        "temperature": 0.5,
        "seed": 3.0,
        "mode": "fast",
        "name": "abc",
    }
    assert parse_extra("") == {}
    with pytest.raises(UserError):
        parse_extra("a:1:2")


def test_table_sorts_by_score_and_spans_multiline_cells():
    table = generate_table([Sample("low", -9.5), Sample("two\nlines", -1.25)])
    assert table.splitlines()[3:6] == ["| two      | -1.25 |", "| lines    |       |", "| low      |  -9.5 |"]
    assert render_table(["a"], []) == "+---+\n| A |\n+---+\n+---+"

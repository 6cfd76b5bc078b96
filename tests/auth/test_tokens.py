"""Token sets, their parsing, rotation steps and reloading."""

from __future__ import annotations

import pytest

from tenor.auth.tokens import TokenSet, TokenSource, new_token, rotation_steps

A, B = "a" * 20, "b" * 20


def test_the_first_token_is_sent_and_every_one_is_accepted() -> None:
    tokens = TokenSet.parse(f"{A}\n\n  {B}  \n", "t")
    assert tokens.sending == A
    assert tokens.accepts(A) and tokens.accepts(B)
    assert not tokens.accepts("") and not tokens.accepts(A[:-1]) and not tokens.accepts(A + "x")
    assert not TokenSet().accepts("") and TokenSet().sending is None


@pytest.mark.parametrize(
    "text", ["short", "has a space in it......", "tab\there..............", "nul\x00char.........."]
)
def test_bad_tokens_are_refused_with_the_place_they_came_from(text) -> None:
    with pytest.raises(ValueError, match="^where: a cell token must be at least 16"):
        TokenSet.parse(text, "where")


def test_rotation_accepts_first_then_sends_then_forgets_the_old_token() -> None:
    steps = rotation_steps(TokenSet((A,)), B)
    assert [s.tokens for s in steps] == [(A, B), (B, A), (B,)]
    # Any two processes one step apart still understand each other.
    for older, newer in zip([TokenSet((A,)), *steps], steps):
        assert newer.accepts(older.sending) and older.accepts(newer.sending)


def test_new_tokens_are_long_and_distinct() -> None:
    assert len({new_token() for _ in range(10)}) == 10
    TokenSet((new_token(),))


def test_a_source_keeps_its_last_good_tokens_when_a_read_fails(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text(A + "\n")
    source = TokenSource.from_file(str(path))
    assert source.sending() == A
    path.write_text("bad")
    assert not source.reload()
    assert source.sending() == A and "at least 16" in source.last_error
    path.write_text(B)
    source.reload()
    assert source.sending() == B and source.last_error == ""


def test_refreshed_says_whether_the_sent_token_changed(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text(A)
    source = TokenSource.from_file(str(path))
    assert not source.refreshed()
    path.write_text(f"{B}\n{A}\n")
    assert source.refreshed() and source.sending() == B

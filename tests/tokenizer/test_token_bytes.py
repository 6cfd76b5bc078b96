"""Tokenizer.token_bytes: a token's own bytes, also for tokens holding part of a character
(OpenAI's chat logprob `bytes`; decoding such a token alone gives U+FFFD)."""

import pytest

from tenor.tokenizer import byte_tokenizer

TEXT = "naïve café 日本語 🙂 ok"


def test_byte_fallback_tokens_give_their_byte(spm):
    token_id = spm.token_to_id("<0xC3>")
    assert spm.decode([token_id], skip_special_tokens=False) == "\ufffd"
    assert spm.token_bytes(token_id) == b"\xc3"


def test_tokens_bytes_join_to_the_text(spm):
    ids = spm.encode(TEXT, add_special_tokens=False)
    joined = b"".join(spm.token_bytes(i) for i in ids).decode("utf-8")
    assert joined == " " + TEXT  # SentencePiece spells the first word with a space too


@pytest.mark.slow
def test_byte_level_pieces_give_their_bytes(smollm):
    ids = smollm.encode(TEXT, add_special_tokens=False)
    assert any("\ufffd" in smollm.decode([i]) for i in ids)  # some token holds part of a character
    assert b"".join(smollm.token_bytes(i) for i in ids) == TEXT.encode("utf-8")


def test_byte_tokenizer():
    tok = byte_tokenizer()
    ids = tok.encode(TEXT)
    assert b"".join(tok.token_bytes(i) for i in ids) == TEXT.encode("utf-8")
    assert tok.token_bytes(0x80 + 3) == b"\x80" and tok.token_bytes(2) == b"</s>"

from __future__ import annotations

import pytest

from tenor.engine.api import Tokenizer as TokenizerProtocol
from tenor.engine.mock_engine import ByteTokenizer as MockByteTokenizer
from tenor.errors import UserError
from tenor.tokenizer import byte_tokenizer

MESSAGES = [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "héllo 🎉"}]


def test_ids_are_utf8_bytes_plus_three():
    tok = byte_tokenizer()
    assert tok.encode("aé") == [ord("a") + 3, 0xC3 + 3, 0xA9 + 3]
    assert tok.encode("aé") == MockByteTokenizer().encode("aé")
    for text in ["", "plain", "日本語 🎉 naïve\n"]:
        assert tok.decode(tok.encode(text)) == text
    assert (tok.vocab_size, tok.eos_token_ids, tok.bos_token_id, tok.pad_token_id) == (259, (2,), 1, 0)
    assert isinstance(tok, TokenizerProtocol)


def test_special_tokens_and_out_of_range_ids():
    tok = byte_tokenizer()
    ids = [1, *tok.encode("hi €"), 2]
    assert tok.decode(ids) == "hi €"
    assert tok.decode(ids, skip_special_tokens=False) == "<s>hi €</s>"
    assert tok.decode([*tok.encode("a"), 259, 5000]) == "a"  # past the vocabulary: nothing
    with pytest.raises(UserError):
        tok.decode([-1])
    assert tok.id_to_token(2) == "</s>" and tok.id_to_token(3) == "<0x00>" and tok.id_to_token(259) is None
    assert tok.token_to_id("<0xFF>") == 258 and tok.token_to_id("</s>") == 2 and tok.token_to_id("zz") is None
    assert tok.is_special(1) and not tok.is_special(70)


def test_chat_template_is_the_mock_engines():
    tok = byte_tokenizer()
    for prompt in (True, False):
        assert tok.apply_chat_template(MESSAGES, prompt) == MockByteTokenizer().apply_chat_template(MESSAGES, prompt)
    assert tok.encode_chat(MESSAGES) == tok.encode("system: Be nice.\nuser: héllo 🎉\nassistant:")
    with pytest.raises(UserError, match="content"):
        tok.apply_chat_template([{"role": "user"}])
    with pytest.raises(UserError, match="must be a string"):
        tok.encode(None)  # type: ignore[arg-type]


def test_save_is_refused(tmp_path):
    with pytest.raises(UserError, match="no files"):
        byte_tokenizer().save(tmp_path)

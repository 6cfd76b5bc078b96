"""Streaming detokenization: token by token, the text equals a full decode, and no step
ever shows a broken character."""

from __future__ import annotations

import random

import pytest

from tenor.tokenizer import IncrementalDetokenizer, byte_tokenizer
from tenor.tokenizer.detokenizer import MAX_HELD_TOKENS

TEXTS = [
    "Plain ASCII, with punctuation!",
    "Accents: naïve café résumé Ångström",
    "CJK: 日本語のテキスト、中文文本、한국어",
    "Emoji: 🎉🤖 👍🏽 👨‍👩‍👧 🇫🇷 done",
    "Newlines\nand\r\n\ttabs\n\n  indented  ",
    "Mixed: €100 — 3½ ℃ ∑∫ 😀 end",
]


def stream(tokenizer, ids, prompt_ids=(), step=1):
    detok = IncrementalDetokenizer(tokenizer, prompt_ids=prompt_ids)
    parts = [detok.add(ids[i : i + step]) for i in range(0, len(ids), step)]
    return parts, detok.flush()


@pytest.mark.parametrize("text", TEXTS)
def test_smollm_token_by_token_equals_full_decode(smollm, text):
    ids = smollm.encode(text)
    parts, rest = stream(smollm, ids)
    assert "".join(parts) + rest == smollm.decode(ids) == text
    assert rest == ""
    assert not any("\ufffd" in part for part in parts)


def test_smollm_with_prompt_and_uneven_steps(smollm):
    prompt = smollm.encode_chat([{"role": "user", "content": "Say something in Japanese 🙂"}])
    answer = smollm.encode("はい、こんにちは！🎌 Great<|im_end|>")
    for step in (1, 2, 3, 7):
        parts, rest = stream(smollm, answer, prompt_ids=prompt, step=step)
        assert "".join(parts) + rest == smollm.decode(answer) == "はい、こんにちは！🎌 Great"
        assert not any("\ufffd" in part for part in parts)


def test_smollm_byte_pieces_are_held_back(smollm):
    ids = smollm.encode("🎉")
    assert len(ids) > 1 and smollm.decode(ids[:1]).endswith("\ufffd")  # a piece of a character alone
    detok = IncrementalDetokenizer(smollm)
    assert [detok.add([i]) for i in ids] == [""] * (len(ids) - 1) + ["🎉"]


def test_smollm_random_token_streams(smollm):
    """Any id sequence, even one with broken bytes and special tokens, comes out as decode says."""
    rng = random.Random(1234)
    for _ in range(150):
        ids = [rng.randrange(smollm.vocab_size) for _ in range(rng.randrange(1, 25))]
        parts, rest = stream(smollm, ids, step=rng.choice((1, 2)))
        assert "".join(parts) + rest == smollm.decode(ids)


def test_sentencepiece_spaces_need_left_context(spm):
    text = "Hello world, the lazy fox. 日本 🎉 ok"
    ids = spm.encode(text, add_special_tokens=False)
    assert spm.id_to_token(ids[-4]).startswith("<0x")  # 🎉 is not in the vocabulary: byte fallback
    # decoding token by token alone loses the spaces: the reason for the context window
    assert "".join(spm.decode([i]) for i in ids) != text
    parts, rest = stream(spm, ids)
    assert "".join(parts) + rest == spm.decode(ids) == text
    assert not any("\ufffd" in part for part in parts)


def test_sentencepiece_after_a_prompt_keeps_the_leading_space(spm):
    prompt = spm.encode("The quick brown fox")
    answer = spm.encode(" jumps over", add_special_tokens=False)
    parts, rest = stream(spm, answer, prompt_ids=prompt)
    assert "".join(parts) + rest == " jumps over"
    assert spm.decode(answer) == "jumps over"  # alone, the decoder drops the first space


def test_byte_tokenizer_multibyte_characters_split_across_tokens():
    tok = byte_tokenizer()
    text = "a€b日本🎉é"
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok)
    parts = [detok.add([i]) for i in ids]
    assert parts[:4] == ["a", "", "", "€"]  # € is three bytes: held until whole
    assert "".join(parts) + detok.flush() == text
    assert not any("\ufffd" in part for part in parts)


def test_incomplete_character_at_the_end_comes_out_on_flush():
    tok = byte_tokenizer()
    ids = tok.encode("ok€")[:-1]
    detok = IncrementalDetokenizer(tok)
    assert "".join(detok.add([i]) for i in ids) == "ok"
    assert detok.flush() == "\ufffd" == tok.decode(ids)[-1]


def test_broken_bytes_do_not_grow_the_window_forever():
    tok = byte_tokenizer()
    ids = [0xFF + 3] * (3 * MAX_HELD_TOKENS) + tok.encode("fine")
    detok = IncrementalDetokenizer(tok)
    parts = [detok.add([i]) for i in ids]
    assert "".join(parts[: 2 * MAX_HELD_TOKENS])  # released before the stream ends
    assert "".join(parts) + detok.flush() == tok.decode(ids)


class CountingTokenizer:
    """Wraps a tokenizer and records how many ids each decode call gets."""

    def __init__(self, inner):
        self.inner = inner
        self.eos_token_ids = inner.eos_token_ids
        self.sizes: list[int] = []

    def decode(self, ids, skip_special_tokens=True):
        self.sizes.append(len(ids))
        return self.inner.decode(ids, skip_special_tokens)


def test_cost_per_token_is_bounded(smollm):
    counting = CountingTokenizer(smollm)
    ids = smollm.encode("A long answer with many words and 日本語 and emoji 🎉. " * 60)
    parts, rest = stream(counting, ids, prompt_ids=list(range(100, 400)))
    assert "".join(parts) + rest == smollm.decode(ids)
    assert len(ids) > 900 and max(counting.sizes) <= 8

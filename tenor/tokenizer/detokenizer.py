"""Streaming text out of generated token ids, one small decode per step.

Decoding one token alone gives the wrong text in two ways:

* a character can span tokens (byte-level BPE pieces, SentencePiece <0xE2> byte
  tokens): the first piece alone decodes to U+FFFD, the replacement character;
* a token's text can depend on its left neighbour: SentencePiece decoders drop the
  leading space of the first token of a sequence, so "▁world" alone is "world" but
  after "▁Hello" it is " world".

So we keep two marks in the id list. Text of ids before `read` has been emitted. `prefix`
(<= read) starts a short window of already-emitted ids that we decode again as left
context. Each step decodes ids[prefix:] and returns what it adds past the decoded context
ids[prefix:read]. When that window text ends in U+FFFD, a character is still incomplete
and we hold back. Once the step's text is complete we slide: prefix moves up to the old
read mark and read to the end, so the window stays a few tokens long and a step costs
O(window), not O(length).

A window that keeps ending in U+FFFD (a model emitting broken bytes) would grow without
bound; after MAX_HELD_TOKENS we emit the text of all but the last UTF8_TAIL_TOKENS tokens
(an incomplete UTF-8 character has at most three bytes, so with a byte or more per token
it lies in them), provided that text is a prefix of the window's. Only in such broken
streams can the result differ from a full decode, and only in how many U+FFFD a run of
bad bytes at the cut becomes.
"""

from __future__ import annotations

from typing import Sequence

from tenor.engine.api import Tokenizer as TokenizerProtocol

REPLACEMENT_CHAR = "\ufffd"
PROMPT_CONTEXT_TOKENS = 5  # left context taken from the prompt for the first generated token
MAX_HELD_TOKENS = 16
UTF8_TAIL_TOKENS = 3


class IncrementalDetokenizer:
    """`"".join(d.add(...) for each step) + d.flush()` equals `tokenizer.decode(all ids)`
    (with a prompt: the text those ids add after the prompt, which for SentencePiece keeps
    the leading space that decoding the ids alone would drop)."""

    def __init__(
        self, tokenizer: TokenizerProtocol, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = list(prompt_ids)
        self._num_prompt = len(self._ids)
        self._read = len(self._ids)
        self._prefix = max(0, self._read - PROMPT_CONTEXT_TOKENS)
        self._context_text = self._decode(self._prefix, self._read)

    @property
    def token_ids(self) -> list[int]:
        """The ids added so far (not the prompt)."""
        return self._ids[self._num_prompt :]

    def add(self, token_ids: Sequence[int]) -> str:
        """Appends ids; returns the new text that is safe to show (maybe empty)."""
        self._ids.extend(token_ids)
        end = len(self._ids)
        text = self._decode(self._prefix, end)
        if not text.endswith(REPLACEMENT_CHAR):
            return self._emit(text, end)
        if end - self._read < MAX_HELD_TOKENS:
            return ""
        cut = end - UTF8_TAIL_TOKENS
        settled = self._decode(self._prefix, cut)
        if not text.startswith(settled):
            return ""
        return self._emit(settled, cut)

    def flush(self) -> str:
        """Whatever is held back (an incomplete character decodes to U+FFFD, as in decode)."""
        return self._emit(self._decode(self._prefix, len(self._ids)), len(self._ids))

    def _emit(self, window_text: str, upto: int) -> str:
        # The context usually decodes to a prefix of the window; if a decoder rewrites
        # across the boundary it does not, and the characters past its length are new.
        new = window_text[len(self._context_text) :]
        if upto > self._read:
            self._prefix, self._read = self._read, upto
            self._context_text = self._decode(self._prefix, self._read)
        else:
            self._context_text = window_text
        return new

    def _decode(self, start: int, end: int) -> str:
        if start >= end:
            return ""
        return self._tokenizer.decode(self._ids[start:end], skip_special_tokens=self._skip_special)

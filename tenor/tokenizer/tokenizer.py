"""A model's tokenizer: HF `tokenizers` for text <-> ids, Jinja for chat templates.

It implements tenor.engine.api.Tokenizer. Build one with tenor.tokenizer.load_tokenizer.
"""

from __future__ import annotations

import functools
import operator
import re
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer as Backend

from tenor.errors import UserError
from tenor.tokenizer.chat_template import ChatTemplate
from tenor.tokenizer.hf_files import write_hf_tokenizer
from tenor.tokenizer.spec import TURN_END_TOKENS, TokenizerSpec

_MAX_ID = 2**32  # the backend stores ids as u32
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's spelling of a raw byte


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE spells each byte as a printable character; this undoes it."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {char: b for b, char in chars.items()}


def as_token_ids(token_ids: Sequence[int]) -> list[int]:
    """Plain ints (numpy and torch integers are welcome); UserError on anything else."""
    try:
        ids = [operator.index(i) for i in token_ids]
    except TypeError:
        raise UserError(f"token ids must be integers, got {list(token_ids)[:8]!r}") from None
    for i in ids:
        if not 0 <= i < _MAX_ID:
            raise UserError(f"token ids must be integers in [0, {_MAX_ID}), got {i}")
    return ids


class Tokenizer:
    """Encode and decode match transformers' fast tokenizer built from the same files
    (decode defaults to skipping special tokens, as generated text wants)."""

    def __init__(self, backend: Backend, spec: TokenizerSpec) -> None:
        self._backend = backend
        self.spec = spec
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self._special_ids = frozenset(i for i, t in backend.get_added_tokens_decoder().items() if t.special)
        self.bos_token_id: int | None = self.token_to_id(spec.bos_token) if spec.bos_token else None
        self.pad_token_id: int | None = self.token_to_id(spec.pad_token) if spec.pad_token else None
        self.eos_token_ids: tuple[int, ...] = self._stop_ids()  # stop on any of these
        self._template = ChatTemplate(spec.chat_template, spec.special_tokens()) if spec.chat_template else None
        first = backend.encode("", add_special_tokens=True).ids[:1]
        self.adds_bos: bool = self.bos_token_id is not None and first == [self.bos_token_id]

    def _stop_ids(self) -> tuple[int, ...]:
        """The configured EOS first, then the configured extras, then special turn-end tokens."""
        candidates = [
            self.token_to_id(self.spec.eos_token) if self.spec.eos_token else None,
            *self.spec.extra_eos_token_ids,
            *(i for i in map(self.token_to_id, TURN_END_TOKENS) if i in self._special_ids),
        ]
        ids: list[int] = []
        for i in candidates:
            if i is not None and i not in ids:
                ids.append(i)
        return tuple(ids)

    @property
    def chat_template(self) -> str | None:
        return self.spec.chat_template

    @property
    def backend(self) -> Backend:
        """The `tokenizers` object (batch encoding, offsets); do not change it."""
        return self._backend

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise UserError(f"text to encode must be a string, got {type(text).__name__}")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids past the vocabulary decode to nothing, as in transformers (a model's
        embedding table may be padded beyond its tokenizer's vocabulary)."""
        ids = as_token_ids(token_ids)
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The rendered prompt; UserError when the model has no template or the messages are
        not a non-empty list of {role, content} strings, or the template rejects them."""
        if self._template is None:
            raise UserError("this model has no chat template; send a plain prompt instead")
        return self._template.render(messages, add_generation_prompt)

    def encode_chat(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """The ids of the rendered prompt. The template writes its own special tokens, so
        none are added on top (transformers' apply_chat_template(tokenize=True) does the same)."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), add_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's own bytes. A token holding part of a character (a byte-fallback
        token, or a byte-level piece) decodes to U+FFFD, and a SentencePiece word token
        decodes without its leading space; its spelling gives its real bytes."""
        spelling = self.id_to_token(token_id) or ""
        byte = _BYTE_FALLBACK.fullmatch(spelling)
        if byte:
            return bytes([int(byte.group(1), 16)])
        if "\u2581" in spelling and not self.is_special(token_id):
            return spelling.replace("\u2581", " ").encode("utf-8")
        text = self.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in text:
            return text.encode("utf-8")
        alphabet = _byte_level_alphabet()
        if spelling and all(char in alphabet for char in spelling):
            return bytes(alphabet[char] for char in spelling)
        return text.encode("utf-8")

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry (byte-level spelling, e.g. 'Ġthe'), or None past the vocabulary."""
        return self._backend.id_to_token(token_id) if 0 <= token_id < self.vocab_size else None

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def save(self, directory: str | Path) -> None:
        """HF tokenizer files; load_tokenizer(directory) gives this tokenizer back."""
        write_hf_tokenizer(Path(directory), self._backend, self.spec)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids}, bos={self.spec.bos_token!r})"
        )

"""A model's tokenizer: HF `tokenizers` for text <-> ids, Jinja for chat templates.

It implements tenor.engine.api.Tokenizer. Build one with tenor.tokenizer.load_tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer as Backend

from tenor.errors import UserError
from tenor.tokenizer.chat_template import ChatTemplate
from tenor.tokenizer.hf_files import write_hf_tokenizer
from tenor.tokenizer.spec import TURN_END_TOKENS, TokenizerSpec

_MAX_ID = 2**32  # the backend stores ids as u32


class Tokenizer:
    """Encode and decode match transformers' fast tokenizer built from the same files
    (decode defaults to skipping special tokens, as generated text wants)."""

    def __init__(self, backend: Backend, spec: TokenizerSpec) -> None:
        self._backend = backend
        self.spec = spec
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id: int | None = self.token_to_id(spec.bos_token) if spec.bos_token else None
        self.pad_token_id: int | None = self.token_to_id(spec.pad_token) if spec.pad_token else None
        self.eos_token_ids: tuple[int, ...] = self._stop_ids()
        self._template = ChatTemplate(spec.chat_template, spec.special_tokens()) if spec.chat_template else None

    def _stop_ids(self) -> tuple[int, ...]:
        """The configured EOS first, then the configured extras, then special turn-end tokens."""
        special = {i for i, token in self._backend.get_added_tokens_decoder().items() if token.special}
        candidates = [self.token_to_id(self.spec.eos_token) if self.spec.eos_token else None,
                      *self.spec.extra_eos_token_ids,
                      *(i for i in map(self.token_to_id, TURN_END_TOKENS) if i in special)]
        ids: list[int] = []
        for i in candidates:
            if i is not None and i not in ids:
                ids.append(i)
        return tuple(ids)

    @property
    def chat_template(self) -> str | None:
        return self.spec.chat_template

    @property
    def adds_bos(self) -> bool:
        """Whether encode(..., add_special_tokens=True) starts with BOS."""
        ids = self._backend.encode("", add_special_tokens=True).ids
        return self.bos_token_id is not None and ids[:1] == [self.bos_token_id]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise UserError(f"text to encode must be a string, got {type(text).__name__}")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids past the vocabulary decode to nothing, as in transformers (a model's
        embedding table may be padded beyond its tokenizer's vocabulary)."""
        ids = list(token_ids)
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < _MAX_ID:
                raise UserError(f"token ids must be integers in [0, {_MAX_ID}), got {i!r}")
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

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry (byte-level spelling, e.g. 'Ġthe'), or None past the vocabulary."""
        return self._backend.id_to_token(token_id) if 0 <= token_id < self.vocab_size else None

    def is_special(self, token_id: int) -> bool:
        token = self._backend.get_added_tokens_decoder().get(token_id)
        return token is not None and token.special

    def save(self, directory: str | Path) -> None:
        """HF tokenizer files; load_tokenizer(directory) gives this tokenizer back."""
        write_hf_tokenizer(Path(directory), self._backend, self.spec)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids}, bos={self.spec.bos_token!r})"

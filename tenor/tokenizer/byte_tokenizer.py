"""The tokenizer of random-weight test models: UTF-8 bytes as ids (byte + 3; 0 pad, 1 BOS,
2 EOS), with the full Tokenizer surface. The mock engine speaks it too."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tenor.errors import UserError
from tenor.tokenizer.chat_template import ChatTemplate
from tenor.tokenizer.tokenizer import as_token_ids

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_OFFSET = 3  # token id = byte value + 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")  # by id
# The mock engine's chat format ("role: content" lines, then "assistant:") as a template,
# so that messages are checked and rendered exactly as for a real model.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class Utf8ByteTokenizer:
    eos_token_ids: tuple[int, ...] = (EOS_ID,)
    vocab_size: int = 256 + BYTE_OFFSET
    bos_token_id: int | None = BOS_ID
    pad_token_id: int | None = PAD_ID
    chat_template: str | None = CHAT_TEMPLATE
    adds_bos = False

    def __init__(self) -> None:
        self._template = ChatTemplate(CHAT_TEMPLATE, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise UserError(f"text to encode must be a string, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UserError(f"text holds a lone surrogate at character {exc.start}; it is not valid Unicode") from None
        return [b + BYTE_OFFSET for b in data]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids past the 259 byte ids decode to nothing (a test model's vocabulary may be padded)."""
        ids = as_token_ids(token_ids)
        if skip_special_tokens:
            return _bytes_text([i for i in ids if BYTE_OFFSET <= i < self.vocab_size])
        # Bytes between special tokens are decoded as runs, so a character split over
        # several ids still comes out whole.
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i < BYTE_OFFSET:
                parts += [_bytes_text(run), SPECIAL_TOKENS[i]]
                run = []
            elif i < self.vocab_size:
                run.append(i)
        return "".join(parts) + _bytes_text(run)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self._template.render(messages, add_generation_prompt)

    def encode_chat(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), add_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's own bytes (one byte for a byte id; a special token's spelling)."""
        if 0 <= token_id < BYTE_OFFSET:
            return SPECIAL_TOKENS[token_id].encode()
        return bytes([token_id - BYTE_OFFSET]) if token_id < self.vocab_size else b""

    def token_to_id(self, token: str) -> int | None:
        if token in SPECIAL_TOKENS:
            return SPECIAL_TOKENS.index(token)
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            try:
                return int(token[3:5], 16) + BYTE_OFFSET
            except ValueError:
                return None
        return None

    def id_to_token(self, token_id: int) -> str | None:
        if 0 <= token_id < BYTE_OFFSET:
            return SPECIAL_TOKENS[token_id]
        if BYTE_OFFSET <= token_id < self.vocab_size:
            return f"<0x{token_id - BYTE_OFFSET:02X}>"
        return None

    def is_special(self, token_id: int) -> bool:
        return 0 <= token_id < BYTE_OFFSET

    def save(self, directory: str | Path) -> None:
        raise UserError("the byte tokenizer of test models has no files to save")


def _bytes_text(ids: Sequence[int]) -> str:
    return bytes(i - BYTE_OFFSET for i in ids).decode("utf-8", errors="replace")


def byte_tokenizer() -> Utf8ByteTokenizer:
    return Utf8ByteTokenizer()

"""What a tokenizer knows beyond its vocabulary: special tokens, BOS/EOS rules, chat template."""

from __future__ import annotations

from dataclasses import dataclass

# Tokens that end a chat turn in common templates. A model that writes one of them as a
# special token means "my turn is over", whatever its configured EOS is (llama.cpp treats
# them the same way: "end of generation" tokens).
TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>")


@dataclass(frozen=True)
class TokenizerSpec:
    """The settings HF keeps in tokenizer_config.json (and GGUF in `tokenizer.*` metadata).

    Whether encode() adds BOS/EOS is not here: it is the backend's post-processor, as in
    transformers (which ignores tokenizer_config's add_bos_token once tokenizer.json exists).
    extra_eos_token_ids: stop ids beyond `eos_token` (generation_config.json, GGUF eot/eom).
    """

    bos_token: str | None = None
    eos_token: str | None = None
    unk_token: str | None = None
    pad_token: str | None = None
    chat_template: str | None = None
    extra_eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("bos_token", "eos_token", "unk_token", "pad_token", "chat_template"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string or None, got {type(value).__name__}")
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in self.extra_eos_token_ids):
            raise ValueError(f"extra_eos_token_ids must be non-negative ints, got {self.extra_eos_token_ids!r}")

    def special_tokens(self) -> dict[str, str]:
        """The named special tokens that are set, as a chat template sees them (bos_token=...)."""
        named = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "unk_token": self.unk_token,
            "pad_token": self.pad_token,
        }
        return {name: token for name, token in named.items() if token is not None}

"""A tokenizer from a GGUF file's `tokenizer.*` metadata.

Byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`) with a known pre-tokenizer
are built here directly with `tokenizers`, in well under a second. The split rules follow
`tokenizer.ggml.pre`, the name llama.cpp gives the model's original pre-tokenizer: for
SmolLM2 ("smollm") that is one token per digit before the GPT-2 split, as in the model's
own tokenizer.json. Every other kind (SentencePiece "llama", unknown pre-tokenizers) is
handed to transformers, which is slower (seconds) but knows more kinds.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

from tenor.checkpoints.gguf_file import MetadataValue, read_gguf_metadata
from tenor.errors import UserError
from tenor.tokenizer.oneline import one_line
from tenor.tokenizer.spec import TokenizerSpec

_TOKENS = "tokenizer.ggml.tokens"
_TOKEN_TYPES = "tokenizer.ggml.token_type"
_MERGES = "tokenizer.ggml.merges"
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types

# llama.cpp's pre-tokenizer names, grouped by the split they stand for.
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}
_GPT2 = {"gpt-2", "mpt", "olmo", "jais"}
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_REGEX_SPLITS = {
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT,
    "falcon3": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}


def read_gguf_tokenizer(path: Path) -> tuple[Backend, TokenizerSpec]:
    """The file's tokenizer and its settings; UserError when the file holds no tokenizer."""
    metadata = read_gguf_metadata(path, wanted_arrays=(_TOKENS, _TOKEN_TYPES, _MERGES))
    tokens = metadata.get(_TOKENS)
    if not isinstance(tokens, list) or not tokens:
        raise UserError(f"{path} has no tokenizer in its metadata (no {_TOKENS})")
    kind = metadata.get("tokenizer.ggml.model")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if kind == "gpt2" and _pre_tokenizer(str(pre)) is not None and isinstance(metadata.get(_MERGES), list):
        backend = _byte_level_backend(metadata, str(pre))
    else:
        backend = _transformers_backend(path)
    spec = _spec(metadata, tokens)
    # llama.cpp adds BOS to SentencePiece vocabularies unless the file says otherwise.
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama"))
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False))
    backend.post_processor = special_token_processor(
        backend, spec.bos_token if add_bos else None, spec.eos_token if add_eos else None
    )
    return backend, spec


def special_token_processor(backend: Backend, bos: str | None, eos: str | None) -> processors.TemplateProcessing:
    """A post-processor that puts `bos` before and `eos` after each sequence (either may be
    None, or a token the vocabulary lacks: then it is left out)."""
    bos_id = backend.token_to_id(bos) if bos is not None else None
    eos_id = backend.token_to_id(eos) if eos is not None else None
    first = [f"{bos}:0"] if bos_id is not None else []
    last = [f"{eos}:0"] if eos_id is not None else []
    second_first = [f"{bos}:1"] if bos_id is not None else []
    second_last = [f"{eos}:1"] if eos_id is not None else []
    used = [(bos, bos_id)] if bos_id is not None else []
    if eos_id is not None and eos != bos:
        used.append((eos, eos_id))
    return processors.TemplateProcessing(
        single=[*first, "$A:0", *last],
        pair=[*first, "$A:0", *last, *second_first, "$B:1", *second_last],
        special_tokens=used,
    )


def _spec(metadata: dict[str, MetadataValue], tokens: list[str]) -> TokenizerSpec:
    def token(key: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None

    extra = tuple(
        index
        for key in ("eot_token_id", "eom_token_id")
        if isinstance(index := metadata.get(f"tokenizer.ggml.{key}"), int) and 0 <= index < len(tokens)
    )
    template = metadata.get("tokenizer.chat_template")
    return TokenizerSpec(
        bos_token=token("bos_token_id"),
        eos_token=token("eos_token_id"),
        unk_token=token("unknown_token_id"),
        pad_token=token("padding_token_id"),
        chat_template=template if isinstance(template, str) else None,
        extra_eos_token_ids=extra,
    )


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer | None:
    if pre in _DIGITS_THEN_GPT2:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre in _GPT2:
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _REGEX_SPLITS:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_REGEX_SPLITS[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return None


def byte_alphabet() -> dict[int, str]:
    """GPT-2's printable spelling of bytes: printable Latin-1 bytes stand for themselves,
    the rest (controls, space, ...) are moved to code points from 256 up, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    kept = set(keep)
    spelling = {b: chr(b) for b in keep}
    moved = (b for b in range(256) if b not in kept)
    spelling.update({b: chr(256 + n) for n, b in enumerate(moved)})
    return spelling


def _byte_level_backend(metadata: dict[str, MetadataValue], pre: str) -> Backend:
    tokens: list[str] = metadata[_TOKENS]  # type: ignore[assignment]
    spelling = byte_alphabet()
    alphabet = set(spelling.values())

    def spelled(token: str) -> str:
        # Some files store added tokens as plain text; the BPE model wants byte spelling.
        return token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8"))

    vocab = {spelled(token): index for index, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in metadata[_MERGES]]  # type: ignore[union-attr]
    backend = Backend(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = _pre_tokenizer(pre)
    backend.decoder = decoders.ByteLevel()
    _add_marked_tokens(backend, tokens, metadata.get(_TOKEN_TYPES), alphabet)
    return backend


def _add_marked_tokens(backend: Backend, tokens: list[str], types: MetadataValue | None, alphabet: set[str]) -> None:
    """Control tokens become special added tokens (matched whole, skipped when decoding
    with skip_special_tokens); user-defined ones become plain added tokens."""
    if not isinstance(types, list):
        return
    # A control token spelled outside the byte alphabet is a mislabelled vocabulary entry;
    # making it an added token would give it a second id past the model's vocabulary.
    control = [
        AddedToken(t, normalized=False, special=True)
        for t, kind in zip(tokens, types)
        if kind == _CONTROL and set(t) <= alphabet
    ]
    user = [
        AddedToken(t, normalized=False, special=False)
        for t, kind in zip(tokens, types)
        if kind == _USER_DEFINED and set(t) <= alphabet
    ]
    if control:
        backend.add_special_tokens(control)
    if user:
        backend.add_tokens(user)


def _transformers_backend(path: Path) -> Backend:
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        raise UserError(f"{path}: this GGUF tokenizer kind needs the transformers package") from None
    try:
        # Not AutoTokenizer: it would also read the model config out of the file with the
        # slow gguf reader (seconds), and the tokenizer it builds is the same.
        hf = PreTrainedTokenizerFast.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except (ValueError, KeyError, OSError, TypeError) as e:
        raise UserError(f"{path}: cannot build its tokenizer: {one_line(e)}") from None
    backend = getattr(hf, "backend_tokenizer", None)
    if not isinstance(backend, Backend):
        raise UserError(f"{path}: transformers gave no fast tokenizer for this file")
    return backend

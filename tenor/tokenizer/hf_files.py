"""HF tokenizer files in a directory: reading them (as transformers would) and writing them.

A directory holds `tokenizer.json` (the `tokenizers` model, with its post-processor: it
alone decides whether encode adds BOS, as in transformers 5), `tokenizer_config.json`
(special tokens, maybe the chat template), maybe `special_tokens_map.json` (older
files), `chat_template.jinja` (newer files; it wins over the config's entry) and
`generation_config.json` (the stop ids generation uses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as Backend

from tenor.errors import UserError
from tenor.tokenizer.oneline import one_line
from tenor.tokenizer.spec import TokenizerSpec

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
CHAT_TEMPLATE_JINJA = "chat_template.jinja"
GENERATION_CONFIG = "generation_config.json"
# Files of tokenizers that have no tokenizer.json; transformers can convert them.
SLOW_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "spiece.model", "vocab.txt")
# Our own key in tokenizer_config.json: the stop ids beyond eos_token, so that save/load
# keeps them without writing generation_config.json (which belongs to the model).
EXTRA_EOS_KEY = "tenor_eos_token_ids"
_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def has_tokenizer_files(directory: Path) -> bool:
    return any((directory / name).is_file() for name in (TOKENIZER_JSON, TOKENIZER_CONFIG, *SLOW_TOKENIZER_FILES))


def read_hf_tokenizer(directory: Path) -> tuple[Backend, TokenizerSpec]:
    """The directory's tokenizer; UserError (one line) when it has none or a broken one."""
    config = _json_object(directory / TOKENIZER_CONFIG)
    if (directory / TOKENIZER_JSON).is_file():
        try:
            backend = Backend.from_file(str(directory / TOKENIZER_JSON))
        except Exception as e:  # tokenizers raises plain Exception for any parse problem
            raise UserError(f"{directory / TOKENIZER_JSON} cannot be read: {one_line(e)}") from None
    elif any((directory / name).is_file() for name in SLOW_TOKENIZER_FILES):
        backend = _converted_backend(directory)
    else:
        raise UserError(f"{directory} has no tokenizer files (expected {TOKENIZER_JSON} and {TOKENIZER_CONFIG})")
    return backend, _spec(directory, config, backend)


def write_hf_tokenizer(directory: Path, backend: Backend, spec: TokenizerSpec) -> None:
    """tokenizer.json, tokenizer_config.json and chat_template.jinja, readable by
    read_hf_tokenizer and by transformers' AutoTokenizer."""
    if directory.exists() and not directory.is_dir():
        raise UserError(f"cannot save a tokenizer to {directory}: it is a file")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        backend.save(str(directory / TOKENIZER_JSON))
        config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **spec.special_tokens()}
        if spec.extra_eos_token_ids:
            config[EXTRA_EOS_KEY] = list(spec.extra_eos_token_ids)
        (directory / TOKENIZER_CONFIG).write_text(
            json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        template_file = directory / CHAT_TEMPLATE_JINJA
        if spec.chat_template is not None:
            template_file.write_text(spec.chat_template, encoding="utf-8")
        elif template_file.is_file():
            template_file.unlink()  # a stale template from an earlier save would come back on load
    except OSError as e:
        raise UserError(f"cannot save a tokenizer to {directory}: {e.strerror or e}") from None


def _spec(directory: Path, config: dict[str, Any], backend: Backend) -> TokenizerSpec:
    tokens = {name: _token_text(config.get(name)) for name in _TOKEN_NAMES}
    if "added_tokens_decoder" not in config:  # older files: the map file has the final word
        special_map = _json_object(directory / SPECIAL_TOKENS_MAP)
        tokens.update({name: _token_text(special_map[name]) for name in _TOKEN_NAMES if name in special_map})
    if EXTRA_EOS_KEY in config:
        extra = _id_list(config[EXTRA_EOS_KEY], directory / TOKENIZER_CONFIG)
    else:
        generation = _json_object(directory / GENERATION_CONFIG)
        extra = _id_list(generation.get("eos_token_id"), directory / GENERATION_CONFIG)
    vocab_size = backend.get_vocab_size(with_added_tokens=True)
    return TokenizerSpec(
        **tokens,
        chat_template=_chat_template(directory, config),
        extra_eos_token_ids=tuple(i for i in extra if i < vocab_size),
    )


def _chat_template(directory: Path, config: dict[str, Any]) -> str | None:
    jinja_file = directory / CHAT_TEMPLATE_JINJA
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _token_text(value: object) -> str | None:
    """A special token as config files write it: a string, or an AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _id_list(value: object, source: Path) -> tuple[int, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise UserError(f"{source}: eos token ids must be non-negative integers, got {value!r}")
    return tuple(values)


def _json_object(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not valid JSON: {one_line(e)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _converted_backend(directory: Path) -> Backend:
    """A tokenizer.json-less directory (vocab.json + merges.txt, tokenizer.model), via transformers."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UserError(f"{directory} has no {TOKENIZER_JSON}; converting its files needs transformers") from None
    try:
        hf = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (ValueError, KeyError, OSError, TypeError, ImportError) as e:
        raise UserError(f"{directory}: cannot read its tokenizer: {one_line(e)}") from None
    backend = getattr(hf, "backend_tokenizer", None)
    if not isinstance(backend, Backend):
        raise UserError(f"{directory}: transformers gave no fast tokenizer for these files")
    return backend

"""Rendering a model's Jinja chat template, the way transformers' apply_chat_template does.

Templates come with model files, so they are untrusted code: they run in Jinja's immutable
sandbox. The environment matches the one transformers gives templates (trim_blocks,
lstrip_blocks, loop controls, a `tojson` that does not HTML-escape, `raise_exception`,
`strftime_now`), so the same template renders the same text here and there.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tenor.errors import UserError
from tenor.tokenizer.oneline import one_line

# Errors a template can raise on messages it does not like; all of them are the caller's.
_RENDER_ERRORS = (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError)


def validate_messages(messages: object) -> list[dict[str, str]]:
    """A fresh list of message dicts, or UserError saying what is wrong (one line).

    Each message needs `role` and `content`, both strings; other keys (e.g. `name`) pass
    through when they are strings too."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise UserError(f"messages must be a list of {{role, content}} objects, got {type(messages).__name__}")
    if not messages:
        raise UserError("messages must not be empty")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise UserError(f"messages[{i}] must be an object with role and content, got {type(message).__name__}")
        for key in ("role", "content"):
            if key not in message:
                raise UserError(f"messages[{i}] has no {key!r}")
        for key, value in message.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise UserError(f"messages[{i}].{key} must be a string, got {type(value).__name__}")
        if not message["role"]:
            raise UserError(f"messages[{i}].role must not be empty")
        checked.append(dict(message))
    return checked


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """One model's template, compiled on first use (a broken template must not stop the
    model from serving plain completions)."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        self.source = source
        self._special_tokens = dict(special_tokens)
        self._compiled: jinja2.Template | None = None

    def render(self, messages: object, add_generation_prompt: bool = True) -> str:
        checked = validate_messages(messages)
        template = self._compile()
        try:
            return template.render(
                messages=checked,
                tools=None,
                documents=None,
                add_generation_prompt=bool(add_generation_prompt),
                **self._special_tokens,
            )
        except _RENDER_ERRORS as e:
            raise UserError(f"the chat template rejected the messages: {one_line(e)}") from None

    def _compile(self) -> jinja2.Template:
        if self._compiled is None:
            try:
                self._compiled = _environment().from_string(self.source)
            except jinja2.TemplateError as e:
                raise UserError(f"the model's chat template does not compile: {one_line(e)}") from None
        return self._compiled

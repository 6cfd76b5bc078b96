"""load_tokenizer's answers to bad paths: one line, the path in it."""

from __future__ import annotations

import pytest

from tenor.errors import UserError
from tenor.tokenizer import load_tokenizer


def _one_line_error(path) -> str:
    with pytest.raises(UserError) as info:
        load_tokenizer(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_path(tmp_path):
    assert "no such file or directory" in _one_line_error(tmp_path / "nope")


def test_directory_without_tokenizer_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert "has no tokenizer files" in _one_line_error(tmp_path)


def test_directory_with_only_a_gguf_points_at_it(tmp_path):
    (tmp_path / "model.Q4.gguf").write_bytes(b"GGUF")
    assert "give the file: " + str(tmp_path / "model.Q4.gguf") in _one_line_error(tmp_path)


def test_file_that_is_not_gguf(tmp_path):
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"\x00" * 64)
    assert "neither a GGUF file nor a directory" in _one_line_error(path)


def test_broken_tokenizer_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Nope"}}')
    assert "tokenizer.json cannot be read" in _one_line_error(tmp_path)


def test_broken_tokenizer_config(smollm, tmp_path):
    smollm.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert "is not valid JSON" in _one_line_error(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[1, 2]")
    assert "must hold a JSON object" in _one_line_error(tmp_path)


def test_bad_generation_config(smollm, tmp_path):
    smollm.save(tmp_path)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": "two"}')
    assert "eos token ids must be non-negative integers" in _one_line_error(tmp_path)


def test_save_onto_a_file_is_refused(smollm, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(UserError, match="it is a file"):
        smollm.save(target)


def test_save_removes_a_stale_template(smollm, tmp_path):
    from tenor.tokenizer import Tokenizer, TokenizerSpec

    smollm.save(tmp_path)
    Tokenizer(smollm.backend, TokenizerSpec(eos_token="<|im_end|>")).save(tmp_path)
    assert load_tokenizer(tmp_path).chat_template is None

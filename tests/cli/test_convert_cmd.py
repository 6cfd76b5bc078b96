import json

import pytest

from tenor.checkpoints.format import load_checkpoint
from tenor.cli.main import main
from tests.checkpoints.tiny_hf import make_llama


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf")
    make_llama(path)
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err  # one line, never a traceback
    assert err.startswith("tenor: error: ")
    return err


def test_convert(hf_dir, tmp_path, capsys):
    dst = tmp_path / "ckpt"
    assert main(["convert", str(hf_dir), str(dst), "--dtype", "bfloat16", "--quantize", "int8"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"wrote {dst}"
    assert "convert hf" in err and "tensor" in err  # the progress bar, on stderr
    loaded = load_checkpoint(dst)
    assert loaded.quantization == "int8" and loaded.weights["embed.weight"].dtype.is_floating_point


def test_missing_source(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "nope"), str(tmp_path / "ckpt")]) == 2
    assert _error_line(capsys) == f"tenor: error: {tmp_path / 'nope'}: no such file or directory"
    assert not (tmp_path / "ckpt").exists()


def test_existing_destination(hf_dir, tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    assert main(["convert", str(hf_dir), str(tmp_path / "ckpt"), "--no-progress"]) == 2
    assert "already exists" in _error_line(capsys)


def test_unknown_architecture(hf_dir, tmp_path, capsys):
    src = tmp_path / "bert"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    assert main(["convert", str(src), str(tmp_path / "ckpt"), "--no-progress"]) == 2
    assert "unsupported architecture ['BertModel']" in _error_line(capsys)


def test_bad_flag(hf_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["convert", str(hf_dir), str(tmp_path / "ckpt"), "--quantize", "int4"])
    assert exit_.value.code == 2 and "invalid choice: 'int4'" in capsys.readouterr().err


@pytest.mark.parametrize("key, value", [("num_attention_heads", 0), ("hidden_size", 0), ("num_attention_heads", "9")])
def test_bad_config_values_are_one_line(hf_dir, tmp_path, capsys, key, value):
    """Config values are checked before any arithmetic (0 heads once divided by zero)."""
    src = tmp_path / "src"
    src.mkdir()
    for item in hf_dir.iterdir():
        (src / item.name).write_bytes(item.read_bytes())
    data = json.loads((src / "config.json").read_text())
    data[key] = value
    (src / "config.json").write_text(json.dumps(data))
    assert main(["convert", str(src), str(tmp_path / "ckpt"), "--no-progress"]) == 2
    assert f"{key} must be a positive integer" in _error_line(capsys)

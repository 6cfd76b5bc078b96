import json
import shutil
from pathlib import Path

import pytest
import torch

from tenor.checkpoints.hf import load_hf
from tenor.errors import CheckpointError
from tenor.models.config import RopeScaling
from tests.checkpoints.tiny_hf import (
    assert_matches_hf,
    gptj_pieces,
    llama_pieces,
    make_gptj,
    make_llama,
)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    path = tmp_path_factory.mktemp("llama")
    return path, make_llama(path)


def _copy(src: Path, dst: Path, **config_changes) -> Path:
    shutil.copytree(src, dst)
    if config_changes:
        data = json.loads((dst / "config.json").read_text())
        data.update(config_changes)
        (dst / "config.json").write_text(json.dumps(data))
    return dst


def test_llama_config_and_weights(llama_dir):
    path, hf = llama_dir
    loaded = load_hf(path)
    c = loaded.config
    assert (c.arch, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) == ("llama", 96, 32, 48, 2)
    assert (c.num_heads, c.num_kv_heads, c.head_dim) == (4, 2, 8)
    assert c.rope_theta == 50000.0 and c.norm_eps == 1e-5 and c.max_position_embeddings == 256
    assert c.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 64)
    assert not c.tie_word_embeddings and c.bos_token_id == 1 and c.eos_token_ids == (2, 3)
    assert (loaded.kind, loaded.quantization, loaded.tokenizer_path) == ("hf", None, None)
    assert_matches_hf(loaded.weights, hf, llama_pieces(2, tied=False))


@pytest.mark.parametrize("layout", ["safetensors-sharded", "bin", "bin-sharded"])
def test_llama_weight_layouts(tmp_path, layout):
    hf = make_llama(tmp_path, layout=layout)
    if layout == "safetensors-sharded":
        assert (tmp_path / "model.safetensors.index.json").is_file()
    assert_matches_hf(load_hf(tmp_path).weights, hf, llama_pieces(2, tied=False))


def test_tied_llama_with_linear_rope(tmp_path):
    hf = make_llama(tmp_path, tie=True, rope={"rope_type": "linear", "factor": 2.0})
    loaded = load_hf(tmp_path)
    assert loaded.config.tie_word_embeddings
    assert loaded.config.rope_scaling == RopeScaling("linear", factor=2.0)
    assert_matches_hf(loaded.weights, hf, llama_pieces(2, tied=True))


def test_transformers_4_config_keys(llama_dir, tmp_path):
    """Hub checkpoints written by transformers 4 carry rope_theta + rope_scaling with "type"."""
    path = _copy(llama_dir[0], tmp_path / "m")
    data = json.loads((path / "config.json").read_text())
    data.pop("rope_parameters", None)
    data.update(rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 4.0}, head_dim=None)
    (path / "config.json").write_text(json.dumps(data))
    config = load_hf(path).config
    assert config.rope_theta == 500000.0 and config.rope_scaling == RopeScaling("linear", factor=4.0)
    assert config.head_dim == 8


def test_gptj(tmp_path):
    hf = make_gptj(tmp_path)
    loaded = load_hf(tmp_path)
    c = loaded.config
    assert (c.arch, c.hidden_size, c.intermediate_size, c.num_heads, c.head_dim, c.rotary_dim) == (
        "gptj",
        32,
        128,
        4,
        8,
        4,
    )
    assert c.max_position_embeddings == 128 and c.eos_token_ids == (2,)
    assert_matches_hf(loaded.weights, hf, gptj_pieces(2))


def test_gptj_zero_heads(tmp_path):
    make_gptj(tmp_path / "ok")
    path = _copy(tmp_path / "ok", tmp_path / "zero", n_head=0)
    with pytest.raises(CheckpointError, match="n_head must be a positive integer, got 0"):
        load_hf(path)


def test_mistral_sliding_window(tmp_path):
    hf = make_llama(tmp_path / "ok", arch="mistral", rope=None, sliding_window=256)
    assert_matches_hf(load_hf(tmp_path / "ok").weights, hf, llama_pieces(2, tied=False))
    _copy(tmp_path / "ok", tmp_path / "windowed", sliding_window=128)
    with pytest.raises(CheckpointError, match=r"config\.json: sliding_window 128 < max_position_embeddings 256"):
        load_hf(tmp_path / "windowed")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"architectures": ["BertModel"]}, r"config\.json: unsupported architecture \['BertModel'\]"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}}, "rope scaling 'yarn'"),
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"num_attention_heads": 3}, "must be a multiple of num_kv_heads"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
        ({"hidden_size": -8}, "hidden_size must be a positive integer, got -8"),
    ],
)
def test_bad_configs(llama_dir, tmp_path, change, message):
    path = _copy(llama_dir[0], tmp_path / "m", **change)
    with pytest.raises(CheckpointError, match=message) as err:
        load_hf(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_shape_mismatch_names_tensor(llama_dir, tmp_path):
    path = _copy(llama_dir[0], tmp_path / "m", intermediate_size=40)
    with pytest.raises(
        CheckpointError,
        match=r"tensor model\.layers\.0\.mlp\.gate_proj\.weight has shape "
        r"\[48, 32\], expected \[40, 32\]",
    ):
        load_hf(path)


def test_unexpected_and_missing_tensors(llama_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    path = _copy(llama_dir[0], tmp_path / "extra")
    state = load_file(path / "model.safetensors")
    save_file({**state, "model.layers.0.self_attn.q_proj.bias": torch.zeros(32)}, path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected tensor model\.layers\.0\.self_attn\.q_proj\.bias"):
        load_hf(path)
    del state["model.norm.weight"]
    save_file(state, path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensor model\.norm\.weight"):
        load_hf(path)


def test_truncated_safetensors(llama_dir, tmp_path):
    path = _copy(llama_dir[0], tmp_path / "m")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file.*truncated"):
        load_hf(path)


def test_truncated_bin(tmp_path):
    make_llama(tmp_path, layout="bin")
    data = (tmp_path / "pytorch_model.bin").read_bytes()
    (tmp_path / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: not a readable PyTorch weights file"):
        load_hf(tmp_path)


def test_missing_things(llama_dir, tmp_path):
    with pytest.raises(CheckpointError, match="no such model directory"):
        load_hf(tmp_path / "nope")
    path = _copy(llama_dir[0], tmp_path / "m")
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors or pytorch_model\*\.bin weights"):
        load_hf(path)
    (path / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        load_hf(path)

import json

import pytest
import torch
from safetensors import safe_open

from tenor.checkpoints.convert import convert
from tenor.checkpoints.format import load_checkpoint
from tenor.errors import CheckpointError, UserError
from tests.checkpoints.tiny_hf import assert_matches_hf, llama_pieces, make_llama


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf")
    return path, make_llama(path)


def test_convert_keeps_dtype_and_values(hf_dir, tmp_path):
    src, hf = hf_dir
    dst = convert(src, tmp_path / "ckpt", progress=False)
    loaded = load_checkpoint(dst)
    assert loaded.config.num_kv_heads == 2 and loaded.quantization is None and loaded.tokenizer_path is None
    assert_matches_hf(loaded.weights, hf, llama_pieces(2, tied=False))
    assert all(t.dtype == torch.float32 for t in loaded.weights.values())


def test_convert_to_bfloat16(hf_dir, tmp_path):
    src, hf = hf_dir
    loaded = load_checkpoint(convert(src, tmp_path / "ckpt", dtype="bfloat16", progress=False))
    assert all(t.dtype == torch.bfloat16 for t in loaded.weights.values())
    assert_matches_hf(loaded.weights, {k: v.to(torch.bfloat16) for k, v in hf.items()}, llama_pieces(2, tied=False))


def test_convert_int8(hf_dir, tmp_path):
    src, hf = hf_dir
    dst = convert(src, tmp_path / "ckpt", dtype="bfloat16", quantize="int8", progress=False)
    assert json.loads((dst / "config.json").read_text())["quantization"] == "int8"
    with safe_open(str(dst / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("layers.1.mlp.gate_up.weight").dtype == torch.int8
        assert f.get_tensor("layers.1.mlp.gate_up.weight_scale").dtype == torch.float32
        assert f.get_tensor("lm_head.weight").dtype == torch.int8
        assert f.get_tensor("embed.weight").dtype == torch.bfloat16
    loaded = load_checkpoint(dst)
    q = loaded.weights["layers.0.attn.qkv.weight"].float() * loaded.weights["layers.0.attn.qkv.weight_scale"][:, None]
    k = hf["model.layers.0.self_attn.k_proj.weight"]
    assert (q[32:48] - k).abs().max() <= k.abs().amax() / 254 + 1e-7  # k rows, off by at most half a step
    # Converting the int8 checkpoint back to float works (dequantized, lossy by that half step).
    back = load_checkpoint(convert(dst, tmp_path / "float", dtype="float32", progress=False))
    assert back.quantization is None and torch.allclose(back.weights["layers.0.attn.qkv.weight"], q)


def test_refusals(hf_dir, tmp_path):
    src, _ = hf_dir
    (tmp_path / "taken").mkdir()
    with pytest.raises(CheckpointError, match="taken: already exists"):
        convert(src, tmp_path / "taken", progress=False)
    with pytest.raises(UserError, match="--dtype must be one of bfloat16, float32"):
        convert(src, tmp_path / "x", dtype="float16", progress=False)
    with pytest.raises(UserError, match="--quantize must be one of int8"):
        convert(src, tmp_path / "x", quantize="int4", progress=False)
    with pytest.raises(CheckpointError, match="missing: no such file or directory"):
        convert(tmp_path / "missing", tmp_path / "x", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_convert_saves_the_tokenizer(hf_dir, tmp_path):
    try:
        from tenor.tokenizer import load_tokenizer
    except ImportError:
        pytest.skip("tenor.tokenizer is not there yet: tokenizer saving cannot be tested")
    from tokenizers import Tokenizer, models, pre_tokenizers

    src = tmp_path / "hf"
    src.mkdir()
    for item in hf_dir[0].iterdir():
        (src / item.name).write_bytes(item.read_bytes())
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "hello", "world", "tenor"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.save(str(src / "tokenizer.json"))
    (src / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )
    loaded = load_checkpoint(convert(src, tmp_path / "ckpt", progress=False))
    assert loaded.tokenizer_path == tmp_path / "ckpt" and (tmp_path / "ckpt" / "tokenizer.json").is_file()
    ids = load_tokenizer(loaded.tokenizer_path).encode("hello tenor world", add_special_tokens=False)
    assert ids == [3, 5, 4] == load_tokenizer(src).encode("hello tenor world", add_special_tokens=False)

import json

import pytest
import torch

from tenor.checkpoints import format as fmt
from tenor.checkpoints.format import COMMIT_FILE, load_checkpoint, save_checkpoint
from tenor.checkpoints.layout import float_specs
from tenor.errors import CheckpointError
from tenor.models.config import ModelConfig
from tenor.registry import TINY_GPTJ, TINY_LLAMA


def random_weights(config: ModelConfig, dtype=torch.float32) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {name: torch.randn(spec.shape, generator=gen).to(dtype) for name, spec in float_specs(config).items()}


@pytest.mark.parametrize("config", [TINY_LLAMA, TINY_GPTJ], ids=["llama", "gptj"])
def test_round_trip(tmp_path, config):
    weights = random_weights(config, torch.bfloat16)
    dst = save_checkpoint(tmp_path / "ckpt", config, weights)
    assert sorted(p.name for p in dst.iterdir()) == ["commit_success.txt", "config.json", "model.safetensors"]
    assert (dst / COMMIT_FILE).read_bytes() == b""
    data = json.loads((dst / "config.json").read_text())
    assert data.pop("format_version") == 1 and data.pop("quantization") is None
    assert ModelConfig.from_dict(data) == config
    loaded = load_checkpoint(dst)
    assert (loaded.config, loaded.quantization, loaded.kind, loaded.source) == (config, None, "tenor", str(dst))
    assert loaded.tokenizer_path is None
    assert list(loaded.weights) == list(weights)
    for name, tensor in weights.items():
        assert loaded.weights[name].dtype == torch.bfloat16 and torch.equal(loaded.weights[name], tensor)
    assert list(tmp_path.iterdir()) == [dst]  # no temporary directory left beside it


def test_sharded(tmp_path):
    weights = random_weights(TINY_LLAMA)
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights, max_shard_bytes=40_000)
    shards = sorted(p.name for p in dst.glob("model-*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(weights) and set(index["weight_map"].values()) == set(shards)
    loaded = load_checkpoint(dst)
    assert all(torch.equal(loaded.weights[n], t) for n, t in weights.items())


def test_aliased_tensors_are_saved(tmp_path):
    """Slices of one tensor (a fused tensor split apart, a tied view) must not trip safetensors."""
    weights = random_weights(TINY_LLAMA)
    weights["lm_head.weight"] = weights["embed.weight"]
    big = torch.randn(2, *weights["layers.0.attn.o.weight"].shape)
    weights["layers.0.attn.o.weight"], weights["layers.1.attn.o.weight"] = big[0], big[1]
    loaded = load_checkpoint(save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights))
    assert torch.equal(loaded.weights["lm_head.weight"], weights["embed.weight"])
    assert torch.equal(loaded.weights["layers.1.attn.o.weight"], big[1])


def test_refuses_existing_destination(tmp_path):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(CheckpointError, match="ckpt: already exists"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def crash(path, tensors):
        raise KeyboardInterrupt

    monkeypatch.setattr(fmt, "_save_shard", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    assert list(tmp_path.iterdir()) == []


def test_unwritable_destination(tmp_path, monkeypatch):
    def disk_full(path, tensors):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fmt, "_save_shard", disk_full)
    with pytest.raises(CheckpointError, match=r"ckpt: cannot write the checkpoint \(No space left on device\)"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CheckpointError, match="no such directory"):
        save_checkpoint(tmp_path / "a" / "b", TINY_LLAMA, random_weights(TINY_LLAMA))


def test_refuses_bad_weights_before_writing(tmp_path):
    weights = random_weights(TINY_LLAMA)
    weights["layers.1.mlp.down.weight"] = torch.zeros(64, 127)
    with pytest.raises(
        CheckpointError,
        match=r"tensor layers\.1\.mlp\.down\.weight has shape \[64, 127\], "
        r"expected \[64, 128\]",
    ):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights)
    del weights["layers.1.mlp.down.weight"]
    with pytest.raises(CheckpointError, match=r"missing tensor layers\.1\.mlp\.down\.weight"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights)
    with pytest.raises(CheckpointError, match="unsupported quantization 'int4'"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA), quantization="int4")
    assert list(tmp_path.iterdir()) == []


def test_half_written_checkpoint_is_refused(tmp_path):
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    (dst / COMMIT_FILE).unlink()
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(dst)
    assert str(err.value) == f"{dst}: no commit_success.txt; the checkpoint may be half-written"


def test_truncated_weights(tmp_path):
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file.*truncated"):
        load_checkpoint(dst)


def test_shape_mismatch_on_load(tmp_path):
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    data = json.loads((dst / "config.json").read_text())
    data["intermediate_size"] = 96
    (dst / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"ckpt: tensor layers\.0\.mlp\.gate_up\.weight has shape \[256, 64\]"):
        load_checkpoint(dst)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format_version": 7}, "format_version 7 is not supported"),
        ({"quantization": "fp4"}, "unsupported quantization 'fp4'"),
        ({"num_heads": 0}, "num_heads must be a positive integer"),
        ({"colour": "red"}, "unknown model config keys: colour"),
    ],
)
def test_bad_config(tmp_path, change, message):
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    data = json.loads((dst / "config.json").read_text())
    data.update(change)
    (dst / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(dst)


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="nope: no such checkpoint directory"):
        load_checkpoint(tmp_path / "nope")


def test_tokenizer_files_are_copied(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "tokenizer_config.json").write_text("{}")
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA), tokenizer_dir=tok)
    assert (dst / "tokenizer.json").read_text() == "{}"
    assert load_checkpoint(dst).tokenizer_path == dst
    (tok / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="a tokenizer file may not be named config.json"):
        save_checkpoint(tmp_path / "ckpt2", TINY_LLAMA, random_weights(TINY_LLAMA), tokenizer_dir=tok)
    assert not (tmp_path / "ckpt2").exists()

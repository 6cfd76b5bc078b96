import dataclasses

import pytest
import torch
from safetensors import safe_open

from tenor.checkpoints.format import load_checkpoint, save_checkpoint
from tenor.checkpoints.quantize import dequantize_weights, quantize_tensor, quantize_weights
from tenor.registry import TINY_GPTJ, TINY_LLAMA
from tests.checkpoints.test_format import random_weights

LLAMA_LINEAR = {"attn.qkv.weight", "attn.o.weight", "mlp.gate_up.weight", "mlp.down.weight"}
GPTJ_LINEAR = {"attn.qkv.weight", "attn.o.weight", "mlp.fc_in.weight", "mlp.fc_out.weight"}


def _is_linear(name: str, linear: set[str]) -> bool:
    return name == "lm_head.weight" or any(name.endswith(suffix) for suffix in linear)


@pytest.mark.parametrize(
    "config, linear", [(TINY_LLAMA, LLAMA_LINEAR), (TINY_GPTJ, GPTJ_LINEAR)], ids=["llama", "gptj"]
)
def test_quantized_names_dtypes_and_error(config, linear):
    weights = random_weights(config)
    q = quantize_weights(weights, config)
    for name, tensor in weights.items():
        if _is_linear(name, linear):
            assert q[name].dtype == torch.int8 and q[name].shape == tensor.shape
            assert q[name + "_scale"].dtype == torch.float32 and q[name + "_scale"].shape == (tensor.shape[0],)
        else:  # embeddings, norms, biases stay float and untouched
            assert q[name] is tensor and name + "_scale" not in q
    back = dequantize_weights(q)
    assert set(back) == set(weights)
    for name, tensor in weights.items():
        row_error = (back[name] - tensor).abs().amax(dim=-1) / tensor.abs().amax(dim=-1)
        assert row_error.max() < 0.01, name


def test_tied_head_is_not_quantized():
    config = dataclasses.replace(TINY_LLAMA, tie_word_embeddings=True)
    q = quantize_weights(random_weights(config), config)
    assert "lm_head.weight" not in q and q["embed.weight"].dtype == torch.float32


def test_scale_and_extremes():
    weight = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.54, 0.5], [-3.0, 3.0, 1.0]])
    q, scale = quantize_tensor(weight.to(torch.bfloat16))
    assert torch.equal(q[0], torch.zeros(3, dtype=torch.int8))  # an all-zero row stays exact
    assert q[1].tolist() == [50, -127, 25] and q[2].tolist() == [-127, 127, 42]
    assert scale[1].item() == pytest.approx(2.54 / 127, rel=1e-2)
    assert torch.equal(dequantize_weights({"w.weight": q, "w.weight_scale": scale})["w.weight"][0], torch.zeros(3))


def test_quantized_checkpoint_stores_int8(tmp_path):
    q = quantize_weights(random_weights(TINY_LLAMA), TINY_LLAMA)
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, q, quantization="int8")
    with safe_open(str(dst / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("layers.0.attn.qkv.weight").dtype == torch.int8
        assert f.get_tensor("layers.0.attn.qkv.weight_scale").dtype == torch.float32
        assert f.get_tensor("embed.weight").dtype == torch.float32
    loaded = load_checkpoint(dst)
    assert loaded.quantization == "int8"
    assert all(torch.equal(loaded.weights[n], t) for n, t in q.items())
    # torch's int8 CPU matmul crashes on int8 weights that are not 16-byte aligned.
    assert all(t.data_ptr() % 64 == 0 for t in loaded.weights.values() if t.dtype == torch.int8)


def test_quantized_checkpoint_is_checked(tmp_path):
    from tenor.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"missing tensor layers\.0\.attn\.qkv\.weight_scale"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA), quantization="int8")
    q = quantize_weights(random_weights(TINY_LLAMA), TINY_LLAMA)
    with pytest.raises(CheckpointError, match=r"unexpected tensor layers\.0\.attn\.o\.weight_scale"):
        save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, q)

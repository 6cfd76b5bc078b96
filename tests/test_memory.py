"""The one memory model against what the engine really allocates, and placement by a real
checkpoint's size."""

import asyncio

import pytest
import torch

from tenor import memory, registry
from tenor.admin.model_specs import placement_of
from tenor.admin.store.base import ModelSpec
from tenor.cli.main import main
from tenor.engine.llm_engine import LLMEngine
from tenor.engine.options import EngineOptions
from tenor.models.layers import ParallelLinear
from tests.checkpoints.tiny_hf import make_gptj


def allocated(config_name: str, dtype: str, quantized_kv: bool) -> tuple[int, int, memory.ReplicaMemory]:
    """(weight bytes, KV cache bytes) the engine holds once started, and the model's figures."""
    servable = registry.get(config_name).with_overrides(dtype=dtype)

    async def start() -> LLMEngine:
        engine = LLMEngine(servable, None, EngineOptions(warmup=False, quantize_kv_cache=quantized_kv))
        await engine.start()
        return engine

    async def stop(engine: LLMEngine) -> None:
        await engine.stop()

    engine = asyncio.run(start())
    try:
        model, cache = engine._runner.model, engine._runner.cache
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        weights += sum(m.weight_nbytes() for m in model.modules() if isinstance(m, ParallelLinear))
        kv = cache.kv.numel() * cache.kv.element_size()
        if cache.scales is not None:
            kv += cache.scales.numel() * cache.scales.element_size()
    finally:
        asyncio.run(stop(engine))
    return weights, kv, servable.memory(quantized_kv=quantized_kv)


@pytest.mark.parametrize("config_name", ["test.TinyLlamaRandom", "test.TinyGPTJRandom"])
@pytest.mark.parametrize("dtype, quantized_kv", [("float32", False), ("float32", True), ("bfloat16", False)])
def test_the_model_matches_what_the_engine_allocates(config_name, dtype, quantized_kv):
    weights, kv, modelled = allocated(config_name, dtype, quantized_kv)
    assert modelled.weight_bytes == pytest.approx(weights, rel=0.05)
    assert modelled.kv_cache_bytes == pytest.approx(kv, rel=0.05)


@pytest.mark.parametrize(
    "dtype, quantized, expected",
    [
        ("bfloat16", False, 2 * 2 * 2 * 16 * 2),
        ("float32", False, 2 * 2 * 2 * 16 * 4),
        ("float32", True, 2 * 2 * 2 * (16 + 4)),  # int8 elements plus one float32 scale per head
    ],
)
def test_kv_bytes_per_token(dtype, quantized, expected):
    assert memory.kv_bytes_per_token(registry.TINY_LLAMA, dtype, quantized) == expected


def placed(checkpoint) -> int:
    return placement_of(ModelSpec.make("/tenor/test/gptj", "gptj.GPTJ6B_BF16", str(checkpoint), 1)).memory_bytes


def test_a_tiny_gptj_checkpoint_is_placed_by_its_real_size(tmp_path):
    make_gptj(tmp_path / "hf")
    for name, flags in (("float", []), ("int8", ["--quantize", "int8"])):
        assert main(["convert", str(tmp_path / "hf"), str(tmp_path / name), "--no-progress", *flags]) == 0
    real = placed(tmp_path / "float")
    # Weights of kilobytes, and the KV cache of the checkpoint's own shape over GPT-J's 32
    # slots x 2048 tokens (2 layers x 2 x 4 heads x 8 x 2 bytes a token): not GPT-J 6B's 12 GB.
    kv = 32 * 2048 * (2 * 2 * 4 * 8 * 2)
    assert kv < real < kv + (1 << 20)
    tensors = memory.checkpoint_tensors(tmp_path / "float")
    assert memory.loaded_weight_bytes(tensors, "bfloat16") == sum(t.numel for t in tensors) * 2
    quantized = placed(tmp_path / "int8")
    assert quantized < real  # int8 weights count one byte, not two
    unreadable = placed(tmp_path / "nope")
    assert unreadable > 10 << 30  # no checkpoint at hand: the config's size


def test_safetensors_headers_without_torch(tmp_path):
    from safetensors.torch import save_file

    save_file(
        {"a": torch.zeros(3, 4, dtype=torch.int8), "b": torch.zeros(5, dtype=torch.bfloat16)},
        str(tmp_path / "x.safetensors"),
    )
    tensors = sorted(memory.safetensors_tensors(tmp_path / "x.safetensors"), key=lambda t: t.shape)
    assert [(t.shape, t.dtype) for t in tensors] == [((3, 4), "I8"), ((5,), "BF16")]
    assert memory.loaded_weight_bytes(tensors, "float32") == 12 + 5 * 4
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ValueError):
        memory.safetensors_tensors(tmp_path / "bad.safetensors")

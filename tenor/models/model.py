"""Builds a model from a config and tenor-named weights, or from a seed (test models)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from tenor.models import native
from tenor.models.config import ModelConfig
from tenor.models.decoder import DecoderLM
from tenor.models.gptj import GPTJModel
from tenor.models.llama import LlamaModel, Weight

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}") from None


def build_model(
    config: ModelConfig,
    weights: Mapping[str, Weight],
    dtype: torch.dtype,
    weight_format: str = "dense",
    device: str = "cpu",
) -> DecoderLM:
    """`weight_format` "fp16" stores linear weights as float16 for FBGEMM (float32 activations),
    "int8" adds int8 blocks for decode-sized batches. In float32 on the CPU, every format runs
    tenor's fused native kernels for decode where they build (the same products, summed in another
    order); elsewhere, and on a CUDA `device` (dense weights only), torch's own ops."""
    model: LlamaModel | GPTJModel = LlamaModel(config) if config.arch == "llama" else GPTJModel(config)
    model.load_weights(weights, dtype, weight_format, device)
    model.native_kernels = device == "cpu" and dtype == torch.float32 and native.available()
    return model.to(device).eval()  # the rotary tables are buffers built on the CPU


def random_weights(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic random weights in tenor's naming: same seed, same model, everywhere."""
    gen = torch.Generator().manual_seed(seed)
    d, f, v = config.hidden_size, config.intermediate_size, config.vocab_size

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    def norm_weight() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(d, generator=gen)

    weights = {"embed.weight": normal(v, d)}
    for i in range(config.num_layers):
        p = f"layers.{i}."
        weights[p + "attn.qkv.weight"] = normal(config.q_size + 2 * config.kv_size, d)
        weights[p + "attn.o.weight"] = normal(d, config.q_size)
        if config.arch == "llama":
            weights[p + "attn_norm.weight"] = norm_weight()
            weights[p + "mlp_norm.weight"] = norm_weight()
            weights[p + "mlp.gate_up.weight"] = normal(2 * f, d)
            weights[p + "mlp.down.weight"] = normal(d, f)
        else:
            weights[p + "ln.weight"], weights[p + "ln.bias"] = norm_weight(), normal(d)
            weights[p + "mlp.fc_in.weight"], weights[p + "mlp.fc_in.bias"] = normal(f, d), normal(f)
            weights[p + "mlp.fc_out.weight"], weights[p + "mlp.fc_out.bias"] = normal(d, f), normal(d)
    if config.arch == "llama":
        weights["norm.weight"] = norm_weight()
        if not config.tie_word_embeddings:
            weights["lm_head.weight"] = normal(v, d)
    else:
        weights["ln_f.weight"], weights["ln_f.bias"] = norm_weight(), normal(d)
        weights["lm_head.weight"], weights["lm_head.bias"] = normal(v, d), normal(v)
    return weights

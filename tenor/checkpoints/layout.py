"""The weight layout a `ModelConfig` implies: every tenor tensor name with its shape and
dtype, which tensors are fused from pieces, and which are linear (quantizable).

Every importer and the checkpoint reader check tensors against this one table, so a
wrong shape is reported by name before any model code sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tenor.errors import CheckpointError
from tenor.models.config import ModelConfig

QUANTIZATIONS = ("int8",)
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALE_SUFFIX = "_scale"  # "X.weight" quantized -> int8 "X.weight" + float32 "X.weight_scale"


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype | None = None  # None: any floating dtype


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise CheckpointError(f"unsupported quantization {quantization!r}; tenor supports {', '.join(QUANTIZATIONS)}")


def float_specs(config: ModelConfig) -> dict[str, TensorSpec]:
    """Unquantized tensors, in a stable order (embeddings first, layers in order)."""
    d, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
    qkv = config.q_size + 2 * config.kv_size
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (v, d)}
    for i in range(config.num_layers):
        p = f"layers.{i}."
        if config.arch == "llama":
            shapes.update(
                {
                    p + "attn_norm.weight": (d,),
                    p + "attn.qkv.weight": (qkv, d),
                    p + "attn.o.weight": (d, config.q_size),
                    p + "mlp_norm.weight": (d,),
                    p + "mlp.gate_up.weight": (2 * f, d),
                    p + "mlp.down.weight": (d, f),
                }
            )
        else:
            shapes.update(
                {
                    p + "ln.weight": (d,),
                    p + "ln.bias": (d,),
                    p + "attn.qkv.weight": (qkv, d),
                    p + "attn.o.weight": (d, config.q_size),
                    p + "mlp.fc_in.weight": (f, d),
                    p + "mlp.fc_in.bias": (f,),
                    p + "mlp.fc_out.weight": (d, f),
                    p + "mlp.fc_out.bias": (d,),
                }
            )
    if config.arch == "llama":
        shapes["norm.weight"] = (d,)
    else:
        shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,), "lm_head.bias": (v,)})
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, d)
    return {name: TensorSpec(shape) for name, shape in shapes.items()}


def linear_weight_names(config: ModelConfig) -> list[str]:
    """The `X.weight` tensors of linear layers: what int8 quantization replaces."""
    linear = (
        "attn.qkv.weight",
        "attn.o.weight",
        "mlp.gate_up.weight",
        "mlp.down.weight",
        "mlp.fc_in.weight",
        "mlp.fc_out.weight",
    )
    return [name for name in float_specs(config) if name == "lm_head.weight" or name.endswith(linear)]


def tensor_specs(config: ModelConfig, quantization: str | None = None) -> dict[str, TensorSpec]:
    """What a checkpoint of `config` holds, quantized or not."""
    check_quantization(quantization)
    specs = float_specs(config)
    if quantization == "int8":
        for name in linear_weight_names(config):
            rows = specs[name].shape[0]
            specs[name] = TensorSpec(specs[name].shape, torch.int8)
            specs[name + SCALE_SUFFIX] = TensorSpec((rows,), torch.float32)
    return specs


def piece_rows(config: ModelConfig, name: str) -> tuple[int, ...]:
    """Row counts of the pieces stacked into tensor `name` (one piece when not fused)."""
    if name.endswith("attn.qkv.weight"):
        return (config.q_size, config.kv_size, config.kv_size)
    if name.endswith("mlp.gate_up.weight"):
        return (config.intermediate_size, config.intermediate_size)
    return (float_specs(config)[name].shape[0],)


def split_fused(config: ModelConfig, name: str, tensor: torch.Tensor) -> list[torch.Tensor]:
    """The pieces of a fused tensor (q, k, v or gate, up), as views."""
    return list(torch.split(tensor, list(piece_rows(config, name)), dim=0))


def check_shape(where: str, name: str, tensor: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != tuple(expected):
        raise CheckpointError(
            f"{where}: tensor {name} has shape {list(tensor.shape)}, expected {list(expected)} for the model config"
        )


def check_weights(
    where: str, config: ModelConfig, weights: dict[str, torch.Tensor], quantization: str | None = None
) -> None:
    """Raise CheckpointError naming the first missing, unexpected or mis-shaped tensor."""
    specs = tensor_specs(config, quantization)
    missing = [name for name in specs if name not in weights]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: missing tensor {missing[0]}{more}")
    unexpected = sorted(set(weights) - set(specs))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{where}: unexpected tensor {unexpected[0]}{more} for a {config.arch} model")
    for name, spec in specs.items():
        tensor = weights[name]
        check_shape(where, name, tensor, spec.shape)
        if spec.dtype is not None and tensor.dtype != spec.dtype:
            raise CheckpointError(f"{where}: tensor {name} has dtype {tensor.dtype}, expected {spec.dtype}")
        if spec.dtype is None and tensor.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{where}: tensor {name} has dtype {tensor.dtype}, expected a float dtype")

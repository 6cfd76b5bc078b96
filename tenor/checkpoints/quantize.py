"""int8 weight-only quantization, symmetric, one scale per output channel (row).

Each linear `X.weight` [out, in] becomes int8 `X.weight` plus float32 `X.weight_scale`
[out], with weight ~= int8 * scale[:, None]; the format torch's int8 weight-only matmul
(`aten._weight_int8pack_mm`) takes. Embeddings, norms and biases stay float.
"""

from __future__ import annotations

import torch

from tenor.checkpoints.layout import SCALE_SUFFIX, linear_weight_names
from tenor.models.config import ModelConfig

_ROWS_PER_CHUNK = 4096  # bounds the float32 temporaries when quantizing a large LM head


def quantize_tensor(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, float32 per-row scale) for a 2-D float weight."""
    q = torch.empty(weight.shape, dtype=torch.int8)
    scale = torch.empty(weight.shape[0], dtype=torch.float32)
    for start in range(0, weight.shape[0], _ROWS_PER_CHUNK):
        rows = weight[start : start + _ROWS_PER_CHUNK].to(torch.float32)
        # An all-zero row gets scale 1 so that it dequantizes to exact zeros, not NaN.
        s = rows.abs().amax(dim=1) / 127.0
        s = torch.where(s > 0, s, torch.ones_like(s))
        q[start : start + len(rows)] = torch.round(rows / s[:, None]).clamp_(-127, 127).to(torch.int8)
        scale[start : start + len(rows)] = s
    return q, scale


def quantize_weights(weights: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """A new dict with every linear weight quantized to int8 and its scale added."""
    linear = set(linear_weight_names(config))
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        if name in linear:
            out[name], out[name + SCALE_SUFFIX] = quantize_tensor(tensor)
        else:
            out[name] = tensor
    return out


def dequantize_weights(weights: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The inverse of `quantize_weights` (up to rounding): float weights, scales dropped."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        scale = weights.get(name + SCALE_SUFFIX)
        if scale is None:
            out[name] = tensor
        else:
            out[name] = (tensor.to(torch.float32) * scale.to(torch.float32)[:, None]).to(dtype)
    return out

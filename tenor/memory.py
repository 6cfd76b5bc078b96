"""The one memory model (pure Python, no torch): how many bytes a replica's weights and KV
cache take. The engine sizes its KV cache with it, the admin places replicas by it, and the
model server reports it.

Weights are counted from the real tensors when a checkpoint is at hand (safetensors
headers, read without loading anything): a float tensor is held in the serving dtype, any
other (int8 weights of a quantized checkpoint, or a future packed format) keeps its own
dtype. Without a checkpoint the model config gives the count (float weights, serving dtype).
A tied LM head counts twice: its linear keeps a packed copy beside the embedding table.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tenor.models.config import ModelConfig

# Bytes per element, by torch's name ("bfloat16") and by safetensors' ("BF16"). "auto" (the
# serving dtype tenor picks per CPU, tenor.hardware) counts as float32, the widest it picks: bf16
# weights, fp16 weights (a plain copy for decode beside FBGEMM's packed one: 4 bytes) and the
# 8-bit decode weights beside their fp16 copy (3.25 bytes) all fit.
DTYPE_BYTES = {
    "auto": 4,
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "F64": 8,
    "F32": 4,
    "BF16": 2,
    "F16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
FLOAT_DTYPES = frozenset({"float64", "float32", "bfloat16", "float16", "F64", "F32", "BF16", "F16"})
MAX_DEFAULT_KV_BYTES = 2 << 30  # the engine's default KV budget cap (--kv-cache-gb for more)
_MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on a header


def dtype_bytes(dtype: str) -> int:
    name = dtype.removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class TensorInfo:
    """A stored tensor, as far as memory is concerned."""

    shape: tuple[int, ...]
    dtype: str  # torch's or safetensors' name

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def loaded_weight_bytes(tensors: Iterable[TensorInfo], serving_dtype: str) -> int:
    """Bytes the tensors take once loaded: floats in the serving dtype, the rest as stored."""
    serving = dtype_bytes(serving_dtype)
    return sum(
        t.numel * (serving if t.dtype.removeprefix("torch.") in FLOAT_DTYPES else dtype_bytes(t.dtype)) for t in tensors
    )


def tied_head_bytes(model: ModelConfig, serving_dtype: str) -> int:
    return model.vocab_size * model.hidden_size * dtype_bytes(serving_dtype) if model.tie_word_embeddings else 0


def estimated_weight_bytes(model: ModelConfig, serving_dtype: str) -> int:
    """Weights from the config alone (no checkpoint at hand): float weights, biases ignored."""
    return model.num_parameters() * dtype_bytes(serving_dtype) + tied_head_bytes(model, serving_dtype)


def kv_bytes_per_token(model: ModelConfig, kv_dtype: str, quantized: bool = False) -> int:
    """Keys and values of one token over all layers. A quantized (int8) cache stores one byte
    per element plus one scale per token, head and K/V, in the model dtype."""
    item = 1 if quantized else dtype_bytes(kv_dtype)
    scale = dtype_bytes(kv_dtype) if quantized else 0
    return model.num_layers * 2 * model.num_kv_heads * (model.head_dim * item + scale)


def default_kv_cache_bytes(max_batch_size: int, max_target_length: int, bytes_per_token: int) -> int:
    """Enough for every decode slot at full context, capped (set --kv-cache-gb for more)."""
    return min(max_batch_size * max_target_length * bytes_per_token, MAX_DEFAULT_KV_BYTES)


def safetensors_tensors(path: Path) -> list[TensorInfo]:
    """The tensors a .safetensors file holds, from its header only; ValueError if it has none."""
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", prefix)
        if length > _MAX_HEADER_BYTES:
            raise ValueError(f"{path}: safetensors header of {length} bytes is too large")
        try:
            header = json.loads(file.read(length))
        except ValueError as exc:
            raise ValueError(f"{path}: unreadable safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: unreadable safetensors header")
    return [
        TensorInfo(tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
        for name, entry in header.items()
        if name != "__metadata__"
    ]


def checkpoint_tensors(checkpoint: str | Path) -> list[TensorInfo] | None:
    """The tensors of a checkpoint directory's safetensors files; None when it has none (a GGUF
    file, a .bin checkpoint, a remote path), so that callers fall back to the config."""
    directory = Path(checkpoint)
    if not directory.is_dir():
        return None
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    try:
        return [tensor for file in files for tensor in safetensors_tensors(file)]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def checkpoint_model(checkpoint: str | Path) -> ModelConfig | None:
    """The model config stored with a tenor checkpoint (its config.json), if it is one."""
    file = Path(checkpoint) / "config.json"
    try:
        data = json.loads(file.read_text())
        data.pop("format_version")
        data.pop("quantization", None)
        return ModelConfig.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class ReplicaMemory:
    weight_bytes: int
    kv_cache_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes


def replica_memory(
    model: ModelConfig,
    serving_dtype: str,
    max_batch_size: int,
    max_target_length: int,
    checkpoint: str | Path | None = None,
    quantized_kv: bool = False,
) -> ReplicaMemory:
    """What one replica takes: weights by the checkpoint's real tensors when it has
    safetensors (and then its own config's KV shape), else by the config."""
    if checkpoint is not None:
        model = checkpoint_model(checkpoint) or model
        tensors = checkpoint_tensors(checkpoint)
    else:
        tensors = None
    if tensors is not None:
        weights = loaded_weight_bytes(tensors, serving_dtype) + tied_head_bytes(model, serving_dtype)
    else:
        weights = estimated_weight_bytes(model, serving_dtype)
    per_token = kv_bytes_per_token(model, serving_dtype, quantized_kv)
    return ReplicaMemory(weights, default_kv_cache_bytes(max_batch_size, max_target_length, per_token))

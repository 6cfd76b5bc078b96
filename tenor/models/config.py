"""Model architecture configs: frozen dataclasses that validate themselves.

A `ModelConfig` describes the network only (shapes, norms, rotary). How a model is
served (dtype, batch, limits) lives in `tenor.registry.ServableConfig`.

tenor's own weight names (what checkpoints store and `build_model` expects):

Llama family (`arch="llama"`):
    embed.weight                      [vocab, d]
    layers.{i}.attn_norm.weight       [d]
    layers.{i}.attn.qkv.weight        [(heads + 2*kv_heads) * head_dim, d]   q, k, v stacked
    layers.{i}.attn.o.weight          [d, heads * head_dim]
    layers.{i}.mlp_norm.weight        [d]
    layers.{i}.mlp.gate_up.weight     [2 * ffn, d]                          gate, up stacked
    layers.{i}.mlp.down.weight        [d, ffn]
    norm.weight                       [d]
    lm_head.weight                    [vocab, d]   absent when tie_word_embeddings

GPT-J (`arch="gptj"`):
    embed.weight                      [vocab, d]
    layers.{i}.ln.weight / .bias      [d]
    layers.{i}.attn.qkv.weight        [3 * d, d]    q, k, v stacked, no bias
    layers.{i}.attn.o.weight          [d, d]        no bias
    layers.{i}.mlp.fc_in.weight/.bias [ffn, d] / [ffn]
    layers.{i}.mlp.fc_out.weight/.bias [d, ffn] / [d]
    ln_f.weight / .bias               [d]
    lm_head.weight / .bias            [vocab, d] / [vocab]

q/k rows use HF's "rotate half" layout for Llama (GGUF's interleaved layout is undone at
import) and GPT-J's "rotate every two" layout for GPT-J, as in HF transformers.

An int8 checkpoint stores each quantized `X.weight` as int8 plus `X.weight_scale`
[out_features] (float32): weight ~= int8 * scale[:, None].
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

ARCHITECTURES = ("llama", "gptj")


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1-style rope frequency scaling ("llama3"), or "linear"."""

    rope_type: str = "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ("llama3", "linear"):
            raise ValueError(f"unsupported rope_scaling type {self.rope_type!r}; tenor supports 'llama3' and 'linear'")
        if self.factor <= 0:
            raise ValueError(f"rope_scaling.factor must be > 0, got {self.factor}")


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rotary_dim: int | None = None  # GPT-J: rotary applies to the first rotary_dim dims of each head
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.arch!r}; tenor supports {', '.join(ARCHITECTURES)}")
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model config {name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.arch == "gptj":
            if self.num_kv_heads != self.num_heads:
                raise ValueError("GPT-J has no grouped-query attention: num_kv_heads must equal num_heads")
            if self.rotary_dim is None or not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 2:
                raise ValueError(f"GPT-J needs an even rotary_dim in (0, head_dim], got {self.rotary_dim!r}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_parameters(self) -> int:
        """Parameter count (weights only, biases ignored): used to estimate memory."""
        d, f, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = d * (self.q_size + 2 * self.kv_size) + self.q_size * d
        mlp = (3 if self.arch == "llama" else 2) * d * f
        head = 0 if self.tie_word_embeddings else v * d
        return self.num_layers * (attn + mlp) + v * d + head

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(unknown)}")
        values = dict(data)
        if values.get("rope_scaling") is not None:
            values["rope_scaling"] = RopeScaling(**values["rope_scaling"])
        if "eos_token_ids" in values:
            values["eos_token_ids"] = tuple(values["eos_token_ids"])
        try:
            return cls(**values)
        except TypeError as exc:  # a missing required key
            raise ValueError(f"incomplete model config: {exc}") from None

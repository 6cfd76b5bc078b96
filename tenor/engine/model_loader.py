"""Loads what an engine serves: the model weights and the tokenizer for a servable config."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tenor.engine.api import Tokenizer
from tenor.errors import UserError
from tenor.hardware import Precision, resolve_precision
from tenor.models.config import ModelConfig
from tenor.models.decoder import DecoderLM
from tenor.models.llama import Weight
from tenor.models.model import build_model, parse_dtype, random_weights
from tenor.registry import ServableConfig

if TYPE_CHECKING:
    from tenor.dist.leader import GroupLeader


@dataclass
class LoadedModel:
    model: DecoderLM
    config: ModelConfig
    tokenizer: Tokenizer
    dtype: torch.dtype
    precision: Precision
    group: GroupLeader | None = None  # when the model is sharded over a group
    cache_kv_heads: int | None = None  # KV heads this process caches (its shard's); None: all


def resolve_checkpoint(servable: ServableConfig, checkpoint: str | None) -> str | None:
    """The checkpoint path to read, or None for random weights."""
    if checkpoint in (None, "", "None"):
        if servable.random_weights:
            return None
        if servable.default_checkpoint == "default":
            from tenor.checkpoints.default_model import default_gguf_path

            return str(default_gguf_path())
        raise UserError(f"{servable.name} needs a checkpoint; only test.* configs run with None")
    if not Path(checkpoint).exists():
        raise UserError(f"checkpoint {checkpoint} does not exist")
    return checkpoint


def load_model(servable: ServableConfig, checkpoint: str | None, group=None, device: str = "cpu") -> LoadedModel:
    """`device` is resolved already (cpu or cuda); a group's ranks use their group's."""
    if group is not None:
        device = group.spec.device
    try:
        precision = resolve_precision(servable.dtype, servable.quantize, device)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    dtype = parse_dtype(precision.dtype)
    path = resolve_checkpoint(servable, checkpoint)
    if group is not None:  # this process leads a model-server group: each rank loads its slices
        return _load_group_leader(servable, path, group, precision)
    if path is None:
        config = servable.model
        weights: Mapping[str, Weight] = random_weights(config, servable.seed)
        tokenizer_path = None
    else:
        from tenor.checkpoints.loader import load_any

        # The integer kernels read a GGUF's blocks (Q4_0/1/K, Q5_0/1/K, Q8_0) as they are: no float
        # copy, no re-deriving; the embedding's rows are looked up from its blocks.
        keep_blocks = precision.weights in ("int8", "int8a8") and device == "cpu"
        loaded = load_any(path, keep_blocks=keep_blocks)
        config, tokenizer_path = loaded.config, loaded.tokenizer_path
        weights = {**loaded.weights, **loaded.blocks}
        # The checkpoint decides the shapes; the servable config only how to serve them.
        if config.max_position_embeddings < servable.max_target_length:
            config = dataclasses.replace(config, max_position_embeddings=servable.max_target_length)
    model = build_model(config, weights, dtype, precision.weights, device)
    return LoadedModel(model, config, _load_tokenizer(servable, tokenizer_path), dtype, precision)


def _load_group_leader(servable: ServableConfig, path: str | None, leader, precision: Precision) -> LoadedModel:
    # The leader decides the precision; workers build their shards with the same.
    ranked = leader.load(servable, path, precision.dtype, precision.weights)
    tokenizer_path = Path(ranked.tokenizer_path) if ranked.tokenizer_path is not None else None
    return LoadedModel(
        ranked.model,
        ranked.config,
        _load_tokenizer(servable, tokenizer_path),
        ranked.dtype,
        precision,
        group=leader,
        cache_kv_heads=leader.local_kv_heads,
    )


def _load_tokenizer(servable: ServableConfig, path: Path | None) -> Tokenizer:
    from tenor import tokenizer

    if servable.tokenizer == "bytes" or path is None:
        return tokenizer.byte_tokenizer()
    return tokenizer.load_tokenizer(path)

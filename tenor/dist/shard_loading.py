"""Sharded loading: each rank reads only its slices of the checkpoint.

A tenor checkpoint (safetensors) is read with `get_slice`, so only the rank's rows/columns
leave the file. A GGUF file is read one tensor at a time (dequantized, cut, the rest dropped):
a rank never holds more than its shard plus one whole tensor. HF directories and random test
weights go through the whole-model readers and are cut afterwards (test-sized models; convert
a large HF model to a tenor checkpoint first with `tenor convert`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tenor.dist.shard_plan import RankShard, TensorSlice, local_config, tensor_slice
from tenor.errors import CheckpointError
from tenor.models.config import ModelConfig
from tenor.models.decoder import DecoderLM
from tenor.models.model import build_model, random_weights


@dataclass
class ShardSource:
    """A checkpoint opened for slicing: its config and a reader of one sliced tensor."""

    config: ModelConfig
    names: list[str]
    read: Callable[[str, TensorSlice], torch.Tensor]
    tokenizer_path: Path | None


def cut(tensor: torch.Tensor, piece: TensorSlice) -> torch.Tensor:
    """`piece` of a tensor already in memory (or memory-mapped)."""
    if piece.rows is not None:
        tensor = (
            torch.cat([tensor[r.start : r.stop] for r in piece.rows])
            if len(piece.rows) > 1
            else tensor[piece.rows[0].start : piece.rows[0].stop]
        )
    if piece.cols is not None:
        tensor = tensor[:, piece.cols.start : piece.cols.stop]
    return tensor


def finish(tensor: torch.Tensor, piece: TensorSlice, rank: int) -> torch.Tensor:
    """Own copy of the cut tensor, padded with zero rows, zeroed off the leader where asked."""
    if piece.leader_only and rank != 0:
        return torch.zeros_like(tensor)
    if piece.pad_rows:
        pad = torch.zeros((piece.pad_rows, *tensor.shape[1:]), dtype=tensor.dtype)
        return torch.cat([tensor, pad])
    return tensor.clone()


def open_source(path: str | None, config: ModelConfig | None, seed: int) -> ShardSource:
    """A slicing reader for a checkpoint path, or for random weights when path is None."""
    if path is None:
        assert config is not None
        weights = random_weights(config, seed)
        return ShardSource(config, list(weights), lambda name, piece: cut(weights[name], piece), None)
    from tenor.checkpoints.loader import checkpoint_kind

    kind = checkpoint_kind(path)
    if kind == "tenor":
        return _safetensors_source(Path(path))
    if kind == "gguf":
        return _gguf_source(Path(path))
    from tenor.checkpoints.hf import load_hf

    loaded = load_hf(path)
    return ShardSource(
        loaded.config, list(loaded.weights), lambda name, piece: cut(loaded.weights[name], piece), loaded.tokenizer_path
    )


def _safetensors_source(path: Path) -> ShardSource:
    from safetensors import safe_open

    from tenor.checkpoints.format import (
        COMMIT_FILE,
        CONFIG_FILE,
        has_tokenizer_files,
        read_config,
        weight_files,
    )
    from tenor.checkpoints.layout import check_shape, tensor_specs

    if not (path / COMMIT_FILE).is_file():
        raise CheckpointError(f"{path}: no {COMMIT_FILE}; the checkpoint may be half-written")
    config, quantization = read_config(path / CONFIG_FILE)
    specs = tensor_specs(config, quantization)
    handles = {}
    for file in weight_files(path):
        handle = safe_open(str(file), framework="pt")
        for name in handle.keys():
            handles[name] = handle
    missing = [name for name in specs if name not in handles]
    if missing:
        raise CheckpointError(f"{path}: missing tensor {missing[0]}")

    def read(name: str, piece: TensorSlice) -> torch.Tensor:
        view = handles[name].get_slice(name)
        check_shape(str(path), name, torch.empty(view.get_shape(), device="meta"), specs[name].shape)
        if piece.rows is None:
            parts = [view[:, piece.cols.start : piece.cols.stop] if piece.cols is not None else view[:]]
        else:
            parts = [view[r.start : r.stop] for r in piece.rows]
            if piece.cols is not None:
                parts = [p[:, piece.cols.start : piece.cols.stop] for p in parts]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    tokenizer = path if has_tokenizer_files(path) else None
    return ShardSource(config, list(specs), read, tokenizer)


def _gguf_source(path: Path) -> ShardSource:
    from tenor.checkpoints import gguf as g
    from tenor.checkpoints.gguf_file import read_gguf
    from tenor.checkpoints.layout import float_specs

    file = read_gguf(path)
    config = g.gguf_config(g.GGUFMetadata(file), file.tensors)
    groups = g.tensor_groups(file)

    def read(name: str, piece: TensorSlice) -> torch.Tensor:
        return cut(g.read_weight(file, config, name, groups.get(name, {})), piece)

    tokenizer = path if "tokenizer.ggml.tokens" in file.metadata else None
    return ShardSource(config, list(float_specs(config)), read, tokenizer)


def load_shard(
    source: ShardSource,
    shard: RankShard,
    dtype: torch.dtype,
    max_positions: int | None = None,
    weight_format: str = "dense",
    device: str = "cpu",
) -> tuple[DecoderLM, ModelConfig]:
    """This rank's model (built with its local shapes) and the full model's config."""
    config = source.config
    if max_positions is not None and config.max_position_embeddings < max_positions:
        config = dataclasses.replace(config, max_position_embeddings=max_positions)
    weights = {}
    for name in source.names:
        piece = tensor_slice(config, shard, name)
        weights[name] = finish(source.read(name, piece), piece, shard.rank)
    return build_model(local_config(config, shard), weights, dtype, weight_format, device), config

"""The tenor checkpoint: one directory, committed atomically.

    config.json                 ModelConfig fields + "format_version" + "quantization" (null | "int8")
    model.safetensors           weights under tenor's names (tenor.models.config), or when large:
    model-0000i-of-0000n.safetensors + model.safetensors.index.json (HF's index format)
    tokenizer files             as `Tokenizer.save` writes them (optional)
    commit_success.txt          empty, written last: SAX's marker that the checkpoint is whole

The directory is written under a temporary name beside the destination and renamed into
place, so a reader never sees a half-written checkpoint under the real name; a directory
without the marker is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tenor.checkpoints.layout import check_quantization, check_weights, tensor_specs
from tenor.errors import CheckpointError
from tenor.models.block_weights import PackedWeight
from tenor.models.config import ModelConfig

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
COMMIT_FILE = "commit_success.txt"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 4 << 30
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
_RESERVED = (CONFIG_FILE, COMMIT_FILE, WEIGHTS_FILE, INDEX_FILE)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """Weights under tenor's names, ready for model code, from any supported source."""

    config: ModelConfig
    weights: dict[str, torch.Tensor]
    quantization: str | None  # None or "int8" (see tenor.checkpoints.quantize)
    tokenizer_path: Path | None  # what tenor.tokenizer.load_tokenizer reads; None: no tokenizer
    source: str  # the path read, for messages
    kind: str = "tenor"  # "tenor", "hf" or "gguf"
    # Weights kept in a GGUF's blocks, or an embedding as its rows' bytes (`load_gguf(keep_blocks=True)`),
    # not in `weights`.
    blocks: dict[str, PackedWeight] = field(default_factory=dict)


def is_tenor_checkpoint(path: Path) -> bool:
    """True for a directory that claims to be a tenor checkpoint (committed or not)."""
    if (path / COMMIT_FILE).is_file():
        return True
    try:
        return "format_version" in json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False


def has_tokenizer_files(path: Path) -> bool:
    return any((path / name).is_file() for name in TOKENIZER_FILES)


def save_checkpoint(
    dst: str | Path,
    config: ModelConfig,
    weights: dict[str, torch.Tensor],
    *,
    quantization: str | None = None,
    tokenizer_dir: str | Path | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> Path:
    """Write a committed checkpoint at `dst`, which must not exist. Returns `dst`."""
    dst = Path(dst)
    if dst.exists():
        raise CheckpointError(f"{dst}: already exists; choose a new destination")
    if not dst.parent.is_dir():
        raise CheckpointError(f"{dst.parent}: no such directory")
    check_quantization(quantization)
    check_weights(str(dst), config, weights, quantization)
    tmp = dst.parent / f".{dst.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        try:
            _write_config(tmp, config, quantization)
            _write_weights(tmp, weights, max_shard_bytes)
            if tokenizer_dir is not None:
                _copy_tokenizer(Path(tokenizer_dir), tmp)
            (tmp / COMMIT_FILE).write_bytes(b"")
            _fsync_dir(tmp)
            os.rename(tmp, dst)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_dir(dst.parent)
    except OSError as exc:  # disk full, no permission: one line, not a traceback
        raise CheckpointError(f"{dst}: cannot write the checkpoint ({exc.strerror or exc})") from None
    return dst


def _write_config(directory: Path, config: ModelConfig, quantization: str | None) -> None:
    data = json.loads(config.to_json())
    data["format_version"] = FORMAT_VERSION
    data["quantization"] = quantization
    (directory / CONFIG_FILE).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _shards(weights: dict[str, torch.Tensor], max_shard_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in weights.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _write_weights(directory: Path, weights: dict[str, torch.Tensor], max_shard_bytes: int) -> None:
    shards = _shards(_unaliased(weights), max_shard_bytes)
    if len(shards) == 1:
        _save_shard(directory / WEIGHTS_FILE, shards[0])
        return
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        _save_shard(directory / filename, shard)
        weight_map.update(dict.fromkeys(shard, filename))
    total = sum(t.numel() * t.element_size() for shard in shards for t in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _unaliased(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous tensors, cloning those whose memory overlaps another's: safetensors refuses
    aliased tensors (a tied view, slices of one fused tensor)."""
    tensors = {name: t.detach().contiguous() for name, t in weights.items()}
    spans = sorted(
        (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name) for name, t in tensors.items() if t.numel()
    )
    end = 0
    for start, stop, name in spans:
        if start < end:
            tensors[name] = tensors[name].clone()
        end = max(end, stop)
    return tensors


def _save_shard(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    save_file(tensors, str(path), metadata={"format": "pt"})
    # safetensors creates the file 0600; give it the mode the umask gave its directory.
    path.chmod(path.parent.stat().st_mode & 0o666)
    with open(path, "rb") as f:  # the commit marker must not reach disk before the weights
        os.fsync(f.fileno())


def _copy_tokenizer(src: Path, dst: Path) -> None:
    if not src.is_dir():
        raise CheckpointError(f"{src}: tokenizer directory does not exist")
    for item in sorted(src.iterdir()):
        if not item.is_file():
            continue
        if item.name in _RESERVED or item.name.endswith(".safetensors"):
            raise CheckpointError(f"{item}: a tokenizer file may not be named {item.name}")
        shutil.copyfile(item, dst / item.name)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path) -> LoadedCheckpoint:
    """Read a committed tenor checkpoint (through safetensors' memory map)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not (path / COMMIT_FILE).is_file():
        raise CheckpointError(f"{path}: no {COMMIT_FILE}; the checkpoint may be half-written")
    config, quantization = read_config(path / CONFIG_FILE)
    weights = read_safetensors(path, weight_files(path))
    check_weights(str(path), config, weights, quantization)
    # Layer order, not safetensors' sorted order; int8 tensors copied out of the map (see _aligned).
    weights = {name: _aligned(weights[name]) for name in tensor_specs(config, quantization)}
    tokenizer = path if has_tokenizer_files(path) else None
    return LoadedCheckpoint(config, weights, quantization, tokenizer, str(path), "tenor")


def _aligned(tensor: torch.Tensor) -> torch.Tensor:
    """int8 tensors at a 64-byte aligned address. safetensors packs tensors without padding,
    so mapped ones start anywhere, and torch's int8 weight-only CPU matmul
    (aten._weight_int8pack_mm, bf16 path) segfaults on weights not 16-byte aligned."""
    if tensor.dtype == torch.int8 and tensor.data_ptr() % 64:
        return tensor.clone()
    return tensor


def read_json_object(path: Path) -> dict:
    """A JSON file holding an object, or a one-line CheckpointError saying what is wrong."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def read_config(path: Path) -> tuple[ModelConfig, str | None]:
    data = read_json_object(path)
    version = data.pop("format_version", None)
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {version!r} is not supported (expected {FORMAT_VERSION})")
    quantization = data.pop("quantization", None)
    check_quantization(quantization)
    try:
        return ModelConfig.from_dict(data), quantization
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def weight_files(directory: Path, index_name: str = INDEX_FILE, single: str = WEIGHTS_FILE) -> list[Path]:
    """The safetensors files of a directory: the index's shards, or the single file."""
    index = directory / index_name
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{index}: not a valid safetensors index ({exc!r})") from None
        return [directory / name for name in names]
    if not (directory / single).is_file():
        raise CheckpointError(f"{directory}: no {single} or {index_name}")
    return [directory / single]


def read_safetensors(where: Path, files: list[Path]) -> dict[str, torch.Tensor]:
    """All tensors of the given files, read through a memory map; duplicate names are refused."""
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (listed in the index of {where})")
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    if name in weights:
                        raise CheckpointError(f"{file}: tensor {name} appears in more than one file")
                    weights[name] = f.get_tensor(name)
        except SafetensorError as exc:
            raise CheckpointError(f"{file}: not a readable safetensors file ({exc}); is it truncated?") from None
    return weights

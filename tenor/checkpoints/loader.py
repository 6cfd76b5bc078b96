"""Load any checkpoint tenor understands, deciding its kind by content, not by name:
a tenor checkpoint directory, an HF model directory, or a GGUF file."""

from __future__ import annotations

from pathlib import Path

from tenor.checkpoints.format import LoadedCheckpoint, is_tenor_checkpoint, load_checkpoint
from tenor.checkpoints.gguf import is_gguf_file, load_gguf
from tenor.checkpoints.hf import is_hf_directory, load_hf
from tenor.errors import CheckpointError


def checkpoint_kind(path: str | Path) -> str:
    """ "tenor", "hf" or "gguf"; CheckpointError when the path is none of them."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    if path.is_file():
        if is_gguf_file(path):
            return "gguf"
        raise CheckpointError(f"{path}: not a GGUF file (a checkpoint file must start with the GGUF magic)")
    if is_tenor_checkpoint(path):
        return "tenor"
    if is_hf_directory(path):
        return "hf"
    raise CheckpointError(
        f"{path}: neither a tenor checkpoint (config.json + commit_success.txt) "
        "nor an HF model directory (config.json with architectures)"
    )


def load_any(path: str | Path, keep_blocks: bool = False) -> LoadedCheckpoint:
    """Weights under tenor's names from a tenor checkpoint, an HF directory or a GGUF file (a
    GGUF's weights as their blocks with `keep_blocks`, where their types allow: see load_gguf)."""
    kind = checkpoint_kind(path)
    if kind == "gguf":
        return load_gguf(path, keep_blocks)
    if kind == "hf":
        return load_hf(path)
    return load_checkpoint(path)

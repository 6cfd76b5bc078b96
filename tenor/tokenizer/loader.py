"""load_tokenizer: a Tokenizer from whatever path a user gives."""

from __future__ import annotations

from pathlib import Path

from tenor.checkpoints.gguf_file import GGUF_MAGIC
from tenor.errors import UserError
from tenor.tokenizer.gguf_tokenizer import read_gguf_tokenizer
from tenor.tokenizer.hf_files import TOKENIZER_JSON, has_tokenizer_files, read_hf_tokenizer
from tenor.tokenizer.tokenizer import Tokenizer


def load_tokenizer(path: str | Path) -> Tokenizer:
    """From a tenor checkpoint or HF model directory (its HF tokenizer files) or a .gguf
    file (its metadata). Writes nothing anywhere. UserError (one line) on bad input."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}")
    if path.is_dir():
        if not has_tokenizer_files(path):
            ggufs = sorted(p.name for p in path.glob("*.gguf"))
            hint = f"; to use a GGUF's tokenizer, give the file: {path / ggufs[0]}" if ggufs else ""
            raise UserError(
                f"{path} has no tokenizer files (expected {TOKENIZER_JSON} and tokenizer_config.json){hint}"
            )
        return Tokenizer(*read_hf_tokenizer(path))
    if not _is_gguf(path):
        raise UserError(f"{path} is neither a GGUF file nor a directory with {TOKENIZER_JSON}")
    return Tokenizer(*read_gguf_tokenizer(path))


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None

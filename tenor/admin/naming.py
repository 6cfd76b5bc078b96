"""Cell and model names: `/tenor/<cell>` and `/tenor/<cell>/<model>`, as SAX's `/sax/<cell>/<model>`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenor.errors import UserError

PREFIX = "tenor"
CELL_SHAPE = f"/{PREFIX}/<cell>"
MODEL_SHAPE = f"/{PREFIX}/<cell>/<model>"
# Letters, digits, '_', '-' and '.'; starts with a letter or digit. Names become file and etcd key parts,
# so nothing that could climb out of a directory ('..', '/') is allowed.
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _check_part(kind: str, part: str, full: str) -> None:
    if not _PART.match(part) or ".." in part:
        raise UserError(
            f"bad {kind} name {part!r} in {full!r}: use 1-63 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )


@dataclass(frozen=True, order=True)
class CellName:
    cell: str

    def __str__(self) -> str:
        return f"/{PREFIX}/{self.cell}"


@dataclass(frozen=True, order=True)
class ModelName:
    cell: str
    model: str

    @property
    def cell_name(self) -> CellName:
        return CellName(self.cell)

    def __str__(self) -> str:
        return f"/{PREFIX}/{self.cell}/{self.model}"


def _split(name: str, what: str, shape: str) -> list[str]:
    if not isinstance(name, str) or not name.startswith(f"/{PREFIX}/"):
        raise UserError(f"bad {what} name {name!r}: expected {shape}")
    return name[len(PREFIX) + 2 :].split("/")


def parse_cell_name(name: str) -> CellName:
    parts = _split(name, "cell", CELL_SHAPE)
    if len(parts) != 1:
        raise UserError(f"bad cell name {name!r}: expected {CELL_SHAPE}")
    _check_part("cell", parts[0], name)
    return CellName(parts[0])


def parse_model_name(name: str) -> ModelName:
    parts = _split(name, "model", MODEL_SHAPE)
    if len(parts) != 2:
        raise UserError(f"bad model name {name!r}: expected {MODEL_SHAPE}")
    _check_part("cell", parts[0], name)
    _check_part("model", parts[1], name)
    return ModelName(parts[0], parts[1])


def parse_name(name: str) -> CellName | ModelName:
    """A cell or a model name, for commands like `ls` that take either."""
    parts = _split(name, "cell or model", f"{CELL_SHAPE} or {MODEL_SHAPE}")
    return parse_cell_name(name) if len(parts) == 1 else parse_model_name(name)

"""A GGUF file's layout: its key-value metadata and its tensors' table, read with `struct` over a
memory map, and each tensor's bytes as a numpy view of the map.

`gguf.GGUFReader` turns every metadata array into numpy pieces (the default model's 49152 tokens
and 48900 merges, one view per string), which took 2.3 s of `tenor serve`'s start-up on a Zen 4;
this walk reads the arrays a caller asks for (`wanted_arrays`: a tokenizer's) and skips the
others by their sizes, in a few tens of milliseconds.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Union

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from tenor.errors import CheckpointError

MetadataValue = Union[int, float, bool, str, list]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32  # of the tensor data, unless general.alignment says otherwise
_STRING, _ARRAY = 8, 9
# value type -> struct code; every other type is a string (8) or an array (9)
_SCALAR_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SCALAR_SIZES = {t: struct.calcsize("<" + c) for t, c in _SCALAR_CODES.items()}
# GGML types whose items numpy holds as they are; the rest are bytes, a row's blocks to a row
_PLAIN_ITEMS = {
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    dims: tuple[int, ...]  # GGML's order: dims[0] is a row's length
    tensor_type: GGMLQuantizationType
    offset: int  # of its first byte in the file
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy's and torch's order: rows first."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True)
class GGUFFile:
    """A mapped GGUF file. `data` views stay valid while any of them lives (they hold the map)."""

    path: Path
    metadata: dict[str, MetadataValue]  # a skipped array's value is its length
    array_keys: frozenset[str]  # metadata keys whose values are arrays
    tensors: dict[str, GGUFTensor]
    _buffer: mmap.mmap

    def data(self, tensor: GGUFTensor) -> np.ndarray:
        """The tensor's items, shaped as GGUFReader shapes them: float and integer types in
        their own dtype, rows first; block types as uint8, [..., bytes a row]."""
        item = _PLAIN_ITEMS.get(tensor.tensor_type)
        shape = tensor.shape
        if item is None:
            block, block_bytes = GGML_QUANT_SIZES[tensor.tensor_type]
            item, shape = np.uint8, (*shape[:-1], shape[-1] // block * block_bytes)
        count = tensor.n_bytes // np.dtype(item).itemsize
        return np.frombuffer(self._buffer, dtype=item, count=count, offset=tensor.offset).reshape(shape)


def read_gguf(path: Path, wanted_arrays: Collection[str] = ()) -> GGUFFile:
    """The file's metadata (with the arrays named in `wanted_arrays`) and tensor table, mapped.

    Raises CheckpointError (one line) for a file that is not GGUF, is cut short, or names a
    tensor type or extent that cannot be."""
    try:
        with open(path, "rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        raise CheckpointError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    walker = _Walker(buffer, path, frozenset(wanted_arrays))
    try:
        metadata = walker.metadata()
        tensors = walker.tensors(metadata)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: broken GGUF header ({e}); is the file truncated?") from None
    return GGUFFile(path, metadata, frozenset(walker.array_keys), tensors, buffer)


def read_gguf_metadata(path: Path, wanted_arrays: Collection[str] = ()) -> dict[str, MetadataValue]:
    """Every scalar and string of the metadata, plus the arrays named in `wanted_arrays` (each
    other array's value is its length). Raises CheckpointError (one line) for a file that is not
    GGUF or is cut short."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            return _Walker(buffer, path, frozenset(wanted_arrays)).metadata()
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: broken GGUF metadata ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None


class _Walker:
    def __init__(self, buffer: mmap.mmap, path: Path, wanted_arrays: frozenset[str]) -> None:
        self._buf = buffer
        self._path = path
        self._wanted = wanted_arrays
        self._pos = 0
        self._tensor_count = 0
        self.array_keys: list[str] = []

    def metadata(self) -> dict[str, MetadataValue]:
        if self._buf[:4] != GGUF_MAGIC:
            raise CheckpointError(f"{self._path} is not a GGUF file (no GGUF magic at its start)")
        version, self._tensor_count, kv_count = struct.unpack_from("<IQQ", self._buf, 4)
        if version not in SUPPORTED_VERSIONS:
            raise CheckpointError(f"{self._path} is GGUF version {version}; tenor reads versions 2 and 3")
        self._pos = 24
        metadata: dict[str, MetadataValue] = {}
        for _ in range(kv_count):
            key = self._string()
            value_type = self._unpack("<I")
            if value_type == _ARRAY:
                self.array_keys.append(key)
            metadata[key] = self._value(value_type, keep=key in self._wanted)
        return metadata

    def tensors(self, metadata: dict[str, MetadataValue]) -> dict[str, GGUFTensor]:
        """The tensor table, which follows the metadata (call metadata() first)."""
        table = []
        for _ in range(self._tensor_count):
            name = self._string()
            dims = tuple(self._unpack("<Q") for _ in range(self._unpack("<I")))
            raw_type, offset = self._unpack("<I"), self._unpack("<Q")
            table.append((name, dims, raw_type, offset))
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            raise ValueError(f"general.alignment is {alignment!r}")
        start = -self._pos % alignment + self._pos
        tensors: dict[str, GGUFTensor] = {}
        for name, dims, raw_type, offset in table:
            if name in tensors:
                raise ValueError(f"tensor {name} appears twice")
            tensors[name] = self._tensor(name, dims, raw_type, start + offset)
        return tensors

    def _tensor(self, name: str, dims: tuple[int, ...], raw_type: int, offset: int) -> GGUFTensor:
        try:
            tensor_type = GGMLQuantizationType(raw_type)
        except ValueError:
            raise CheckpointError(f"{self._path}: tensor {name} has unknown GGUF type {raw_type}") from None
        block, block_bytes = GGML_QUANT_SIZES[tensor_type]
        if not dims or dims[0] % block:
            raise ValueError(f"tensor {name}'s rows ({list(dims)}) are not whole {tensor_type.name} blocks")
        n_bytes = int(np.prod(dims)) // block * block_bytes
        if offset + n_bytes > len(self._buf):
            raise CheckpointError(f"{self._path}: tensor {name} is cut short; the file is truncated")
        return GGUFTensor(name, dims, tensor_type, offset, n_bytes)

    def _unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        length = self._unpack("<Q")
        end = self._pos + length
        if end > len(self._buf):
            raise ValueError("a string runs past the end of the file")
        text = self._buf[self._pos : end].decode("utf-8")
        self._pos = end
        return text

    def _value(self, value_type: int, keep: bool) -> MetadataValue:
        if value_type in _SCALAR_CODES:
            return self._unpack("<" + _SCALAR_CODES[value_type])
        if value_type == _STRING:
            return self._string()
        if value_type == _ARRAY:
            return self._array(keep)
        raise ValueError(f"unknown metadata value type {value_type}")

    def _array(self, keep: bool) -> MetadataValue:
        item_type = self._unpack("<I")
        count = self._unpack("<Q")
        if item_type in _SCALAR_CODES:
            size = _SCALAR_SIZES[item_type] * count
            if not keep:
                self._pos += size
                return count
            values = list(struct.unpack_from(f"<{count}{_SCALAR_CODES[item_type]}", self._buf, self._pos))
            self._pos += size
            return values
        if item_type == _STRING:
            if keep:
                return [self._string() for _ in range(count)]
            for _ in range(count):
                length = self._unpack("<Q")  # read first: `_pos += _unpack()` would lose the advance
                self._pos += length
            return count
        # arrays of arrays: no key tenor reads uses them, so walk them only to skip
        for _ in range(count):
            self._value(item_type, keep=False)
        return count

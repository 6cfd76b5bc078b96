"""The key-value metadata at the head of a GGUF file, read without touching its tensors.

`gguf.GGUFReader` parses the whole file (every tensor's info, every array as numpy) and
takes about 3 s on the default model; a tokenizer needs only the metadata section, which
this module walks with `struct` over a memory map in well under a second. It keeps the
arrays a tokenizer needs (`wanted_arrays`) and skips the rest by their sizes.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Collection, Union

from tenor.errors import CheckpointError

MetadataValue = Union[int, float, bool, str, list]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
_STRING, _ARRAY = 8, 9
# value type -> struct code; every other type is a string (8) or an array (9)
_SCALAR_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SCALAR_SIZES = {t: struct.calcsize("<" + c) for t, c in _SCALAR_CODES.items()}


def read_gguf_metadata(path: Path, wanted_arrays: Collection[str] = ()) -> dict[str, MetadataValue]:
    """Every scalar and string of the metadata, plus the arrays named in `wanted_arrays`.

    Raises CheckpointError (one line) for a file that is not GGUF or is cut short."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _MetadataWalker(buf, path, frozenset(wanted_arrays)).walk()
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: broken GGUF metadata ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None


class _MetadataWalker:
    def __init__(self, buf: mmap.mmap, path: Path, wanted_arrays: frozenset[str]) -> None:
        self._buf = buf
        self._path = path
        self._wanted = wanted_arrays
        self._pos = 0

    def walk(self) -> dict[str, MetadataValue]:
        if self._buf[:4] != GGUF_MAGIC:
            raise CheckpointError(f"{self._path} is not a GGUF file (no GGUF magic at its start)")
        version, _tensor_count, kv_count = struct.unpack_from("<IQQ", self._buf, 4)
        if version not in SUPPORTED_VERSIONS:
            raise CheckpointError(f"{self._path} is GGUF version {version}; tenor reads versions 2 and 3")
        self._pos = 24
        metadata: dict[str, MetadataValue] = {}
        for _ in range(kv_count):
            key = self._string()
            value_type = self._unpack("<I")
            metadata[key] = self._value(value_type, keep=key in self._wanted)
        return metadata

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
        # arrays of arrays: no tokenizer key uses them, so walk them only to skip
        for _ in range(count):
            self._value(item_type, keep=False)
        return count

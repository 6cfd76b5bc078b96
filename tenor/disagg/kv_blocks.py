"""A prompt's KV blocks in transit, and their wire form: a typed header, then raw bytes.

The header (a protobuf KVHeader) names shapes and dtypes; the tensor bytes follow in bounded
chunks, k/v first and then (int8 caches) the scales. A blake2b checksum and the byte count
catch a corrupted or truncated transfer before anything reaches a cache. Never pickle.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenor.proto import kv_transfer_pb2 as pb

if TYPE_CHECKING:
    import torch

CHUNK_BYTES = 1 << 20  # bounded messages: gRPC's flow control paces them
_DTYPE_NAMES = ("float32", "bfloat16", "float16", "int8")  # torch is imported only when bytes move


class TransferError(Exception):
    """A transfer that cannot be used: corrupted, truncated, malformed or failed. Retry it."""


@dataclass(frozen=True)
class KVBlocks:
    """Full blocks [first_block, first_block + num_blocks) of a prompt, as a cache stores them."""

    block_size: int
    first_block: int
    kv: torch.Tensor  # [layers, 2, kv heads, num_blocks, block_size, head dim]
    scales: torch.Tensor | None  # [..., 1] for int8 k/v; None otherwise

    @property
    def num_blocks(self) -> int:
        return self.kv.shape[3]

    @property
    def num_bytes(self) -> int:
        scale_bytes = 0 if self.scales is None else self.scales.numel() * self.scales.element_size()
        return self.kv.numel() * self.kv.element_size() + scale_bytes


def _raw(tensor: torch.Tensor) -> memoryview:
    import torch

    return tensor.contiguous().view(torch.uint8).reshape(-1).numpy().data  # the array's own buffer, as memoryview(a)


def encode(blocks: KVBlocks, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pb.KVChunk]:
    """The header message, then the tensors' bytes in chunks of at most `chunk_bytes`."""
    parts = [_raw(blocks.kv)] + ([] if blocks.scales is None else [_raw(blocks.scales)])
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(part)
    header = pb.KVHeader(
        block_size=blocks.block_size,
        first_block=blocks.first_block,
        num_blocks=blocks.num_blocks,
        kv_shape=list(blocks.kv.shape),
        kv_dtype=str(blocks.kv.dtype).removeprefix("torch."),
        total_bytes=blocks.num_bytes,
        checksum=digest.digest(),
    )
    if blocks.scales is not None:
        header.scales_shape.extend(blocks.scales.shape)
        header.scales_dtype = str(blocks.scales.dtype).removeprefix("torch.")
    yield pb.KVChunk(header=header)
    for part in parts:
        for start in range(0, len(part), chunk_bytes):
            yield pb.KVChunk(data=bytes(part[start : start + chunk_bytes]))


def _dtype(name: str) -> torch.dtype:
    import torch

    if name not in _DTYPE_NAMES:
        raise TransferError(f"KV header names an unknown dtype {name!r}")
    return getattr(torch, name)


def _nbytes(shape: list[int], dtype: torch.dtype) -> int:
    import torch

    count = 1
    for dim in shape:
        count *= dim
    return count * torch.empty(0, dtype=dtype).element_size()


def _tensor(buffer: bytearray, offset: int, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    import torch

    size = _nbytes(shape, dtype)
    if size:
        flat = torch.frombuffer(buffer, dtype=torch.uint8, count=size, offset=offset)
    else:
        flat = torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape).clone()


def decode(chunks: Iterable[pb.KVChunk], max_bytes: int) -> KVBlocks:
    """Reassembles `encode`'s messages; raises TransferError unless sizes and checksum agree."""
    stream = iter(chunks)
    first = next(stream, None)
    if first is None or first.WhichOneof("part") != "header":
        raise TransferError("KV transfer did not start with a header")
    header = first.header
    kv_dtype = _dtype(header.kv_dtype)
    scales_dtype = _dtype(header.scales_dtype) if header.scales_shape else None
    if len(header.kv_shape) != 6 or any(d < 0 for d in header.kv_shape) or header.kv_shape[3] != header.num_blocks:
        raise TransferError(f"KV header has a malformed shape {list(header.kv_shape)}")
    if not 0 <= header.total_bytes <= max_bytes:
        raise TransferError(f"KV transfer announces {header.total_bytes} bytes; at most {max_bytes} accepted")
    expected = _nbytes(list(header.kv_shape), kv_dtype)
    if scales_dtype is not None:
        expected += _nbytes(list(header.scales_shape), scales_dtype)
    if expected != header.total_bytes:
        raise TransferError(f"KV header's shapes make {expected} bytes, not the {header.total_bytes} announced")
    buffer = bytearray()
    for chunk in stream:
        if chunk.WhichOneof("part") != "data":
            raise TransferError("KV transfer sent a second header")
        buffer += chunk.data
        if len(buffer) > header.total_bytes:
            raise TransferError(f"KV transfer sent more than the {header.total_bytes} bytes announced")
    if len(buffer) != header.total_bytes:
        raise TransferError(f"KV transfer truncated: {len(buffer)} of {header.total_bytes} bytes")
    if hashlib.blake2b(buffer, digest_size=16).digest() != header.checksum:
        raise TransferError("KV transfer checksum mismatch: the bytes were corrupted")
    kv = _tensor(buffer, 0, list(header.kv_shape), kv_dtype)
    scales = None
    if scales_dtype is not None:
        scales = _tensor(buffer, kv.numel() * kv.element_size(), list(header.scales_shape), scales_dtype)
    return KVBlocks(header.block_size, header.first_block, kv, scales)

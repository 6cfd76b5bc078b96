"""The KV wire form: round trips exactly (float and int8 + scales); corruption, truncation and
malformed headers are refused."""

import pytest
import torch

from tenor.disagg.kv_blocks import KVBlocks, TransferError, decode, encode
from tenor.proto import kv_transfer_pb2 as pb


def blocks(quantized: bool) -> KVBlocks:
    gen = torch.Generator().manual_seed(0)
    shape = (2, 2, 3, 4, 16, 8)
    if quantized:
        kv = torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8)
        return KVBlocks(16, 1, kv, torch.rand(shape[:-1] + (1,), generator=gen))
    return KVBlocks(16, 1, torch.randn(shape, generator=gen), None)


@pytest.mark.parametrize("quantized", [False, True])
def test_round_trip_in_bounded_chunks(quantized):
    sent = blocks(quantized)
    chunks = list(encode(sent, chunk_bytes=1000))
    assert all(len(c.data) <= 1000 for c in chunks[1:])
    got = decode(chunks, max_bytes=1 << 20)
    assert (got.block_size, got.first_block, got.num_blocks) == (16, 1, 4)
    assert got.kv.dtype == sent.kv.dtype and torch.equal(got.kv, sent.kv)
    if quantized:
        assert torch.equal(got.scales, sent.scales)
    else:
        assert got.scales is None


def test_empty_transfer_round_trips():
    empty = KVBlocks(16, 3, torch.empty(2, 2, 3, 0, 16, 8), None)
    assert decode(encode(empty), max_bytes=1 << 20).num_blocks == 0


def test_corrupted_byte_is_detected():
    chunks = list(encode(blocks(True), chunk_bytes=1000))
    data = bytearray(chunks[3].data)
    data[7] ^= 0x40
    chunks[3] = pb.KVChunk(data=bytes(data))
    with pytest.raises(TransferError, match="checksum"):
        decode(chunks, max_bytes=1 << 20)


def test_truncated_and_overlong_transfers_are_detected():
    chunks = list(encode(blocks(False), chunk_bytes=1000))
    with pytest.raises(TransferError, match="truncated"):
        decode(chunks[:-1], max_bytes=1 << 20)
    with pytest.raises(TransferError, match="more than"):
        decode(chunks + [chunks[-1]], max_bytes=1 << 20)


def test_malformed_headers_are_refused():
    header = next(encode(blocks(False))).header
    with pytest.raises(TransferError, match="header"):
        decode([pb.KVChunk(data=b"x")], max_bytes=1 << 20)
    bad_dtype = pb.KVHeader()
    bad_dtype.CopyFrom(header)
    bad_dtype.kv_dtype = "object"
    with pytest.raises(TransferError, match="unknown dtype"):
        decode([pb.KVChunk(header=bad_dtype)], max_bytes=1 << 20)
    lying = pb.KVHeader()
    lying.CopyFrom(header)
    lying.total_bytes = 12
    with pytest.raises(TransferError, match="shapes make"):
        decode([pb.KVChunk(header=lying)], max_bytes=1 << 20)
    with pytest.raises(TransferError, match="at most"):
        decode([pb.KVChunk(header=header)], max_bytes=100)

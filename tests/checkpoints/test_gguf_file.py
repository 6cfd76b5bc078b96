"""tenor's GGUF walk against the gguf package's reader, and its answers to broken files."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from tenor.checkpoints.gguf_file import read_gguf
from tenor.errors import CheckpointError


def _write(path, tensors: dict[str, tuple[np.ndarray, Q]], alignment: int | None = None):
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.data_alignment = alignment
        writer.add_uint32("general.alignment", alignment)
    writer.add_uint32("llama.block_count", 2)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    writer.add_array("llama.per_layer", [1, 2])
    for name, (value, qtype) in tensors.items():
        if qtype in (Q.F32, Q.F16):
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tensors() -> dict[str, tuple[np.ndarray, Q]]:
    rng = np.random.default_rng(0)
    return {
        "a.weight": (rng.standard_normal((6, 64)).astype(np.float32), Q.F32),
        "b.weight": (rng.standard_normal((3, 5)).astype(np.float16), Q.F16),
        "c.weight": (rng.standard_normal((4, 64)).astype(np.float32), Q.Q4_1),
        "d.weight": (rng.standard_normal((2, 3, 32)).astype(np.float32), Q.Q8_0),
        "e.weight": (rng.standard_normal((2, 256)).astype(np.float32), Q.BF16),
    }


@pytest.mark.parametrize("alignment", [None, 64])
def test_tensors_and_metadata_match_the_gguf_package(tmp_path, alignment):
    path = _write(tmp_path / "t.gguf", _tensors(), alignment)
    ours, theirs = read_gguf(path, wanted_arrays=("tokenizer.ggml.tokens",)), gguf.GGUFReader(path)
    assert sorted(ours.tensors) == sorted(t.name for t in theirs.tensors)
    for reference in theirs.tensors:
        tensor = ours.tensors[reference.name]
        assert tensor.tensor_type == reference.tensor_type and tensor.n_bytes == reference.n_bytes
        assert tensor.dims == tuple(reference.shape.tolist()) and tensor.shape == tuple(reversed(tensor.dims))
        data = ours.data(tensor)
        assert data.dtype == reference.data.dtype and data.shape == reference.data.shape
        assert np.array_equal(data, reference.data)
    assert ours.metadata["llama.block_count"] == 2 and ours.metadata["llama.rope.freq_base"] == 10000.0
    assert ours.metadata["tokenizer.ggml.tokens"] == ["a", "b", "c"]
    assert ours.metadata["llama.per_layer"] == 2  # not asked for: its length
    assert ours.array_keys == {"tokenizer.ggml.tokens", "llama.per_layer"}


def test_a_file_cut_inside_its_tensors_names_the_first_tensor_cut(tmp_path):
    path = _write(tmp_path / "t.gguf", _tensors())
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 100])
    with pytest.raises(CheckpointError, match=r"t\.gguf: tensor e\.weight is cut short; the file is truncated"):
        read_gguf(path)


def test_broken_headers_are_one_line_errors(tmp_path):
    path = _write(tmp_path / "t.gguf", {"a.weight": (np.ones((2, 32), np.float32), Q.F32)})
    whole = path.read_bytes()
    # The tensor table's last entry: type (uint32) then offset (uint64), just before the data's padding.
    table_end = whole.index(b"a.weight") + len(b"a.weight") + 4 + 2 * 8
    cases = {
        "unknown": (whole[:table_end] + struct.pack("<I", 9999) + whole[table_end + 4 :], "unknown GGUF type 9999"),
        "cut": (whole[: table_end - 3], "broken GGUF header"),
        "empty": (b"", "cannot read"),
        "plain": (b"not a gguf at all", "not a GGUF file"),
    }
    for name, (data, message) in cases.items():
        broken = tmp_path / f"{name}.gguf"
        broken.write_bytes(data)
        with pytest.raises(CheckpointError, match=message) as info:
            read_gguf(broken)
        assert "\n" not in str(info.value)

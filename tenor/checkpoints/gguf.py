"""Import a llama.cpp GGUF file (Llama architecture) under tenor's names, dequantized to float32
or, for the CPU's integer kernels, as the file's own blocks where its types allow (gguf_blocks.py).

llama.cpp's converter reorders the rows of attn_q / attn_k inside each head so that the
two halves of a rotary pair sit next to each other (interleaved: x0, y0, x1, y1, ...),
where HF and tenor keep them apart (rotate-half: x0, x1, ..., y0, y1, ...). Here row
(head, j, half) of the GGUF tensor is row (head, half, j) of tenor's, and that is undone
at import by reordering the (still quantized) rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from tenor.checkpoints.format import LoadedCheckpoint
from tenor.checkpoints.gguf_blocks import BLOCK_TYPES, as_blocks
from tenor.checkpoints.gguf_blocks import dequantize as dequantize_blocks
from tenor.checkpoints.gguf_file import GGUF_MAGIC, GGUFFile, GGUFTensor, read_gguf
from tenor.checkpoints.layout import check_weights, float_specs, linear_weight_names, piece_rows
from tenor.errors import CheckpointError
from tenor.models.block_weights import Blocks, PackedRows, PackedWeight
from tenor.models.config import ModelConfig, RopeScaling

_LAYER_NAMES = {  # GGUF block tensor -> (tenor tensor, index of the piece in a fused tensor)
    "attn_norm.weight": ("attn_norm.weight", 0),
    "attn_q.weight": ("attn.qkv.weight", 0),
    "attn_k.weight": ("attn.qkv.weight", 1),
    "attn_v.weight": ("attn.qkv.weight", 2),
    "attn_output.weight": ("attn.o.weight", 0),
    "ffn_norm.weight": ("mlp_norm.weight", 0),
    "ffn_gate.weight": ("mlp.gate_up.weight", 0),
    "ffn_up.weight": ("mlp.gate_up.weight", 1),
    "ffn_down.weight": ("mlp.down.weight", 0),
}
_GLOBAL_NAMES = {
    "token_embd.weight": "embed.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}


def is_gguf_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def load_gguf(path: str | Path, keep_blocks: bool = False) -> LoadedCheckpoint:
    """Read a Llama GGUF; raises CheckpointError naming the file and the problem. With
    `keep_blocks`, the linear weights and the embedding whose pieces are all of gguf_blocks'
    BLOCK_TYPES come as their blocks (the checkpoint's `blocks`), not dequantized, for the
    integer kernels that read them as they are; an embedding of another quantized type comes as
    its rows' bytes (read_rows)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    file = read_gguf(path)
    config = gguf_config(GGUFMetadata(file), file.tensors)
    groups = tensor_groups(file)
    specs = float_specs(config)
    extra = sorted(set(groups) - set(specs))
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor {_gguf_name(extra[0], 0)} for this config")
    names = [*linear_weight_names(config), "embed.weight"] if keep_blocks else []
    kept: dict[str, PackedWeight | None] = {}
    for name in names:
        kept[name] = read_blocks(file, config, name, groups.get(name, {}))
    if keep_blocks and kept["embed.weight"] is None:
        kept["embed.weight"] = read_rows(file, config, "embed.weight", groups.get("embed.weight", {}))
    blocks = {name: weight for name, weight in kept.items() if weight is not None}
    weights = {name: read_weight(file, config, name, groups.get(name, {})) for name in specs if name not in blocks}
    shapes = {name: torch.empty(weight.shape, device="meta") for name, weight in blocks.items()}  # no memory
    check_weights(str(path), config, {**weights, **shapes})
    tokenizer = path if "tokenizer.ggml.tokens" in file.metadata else None
    return LoadedCheckpoint(config, weights, None, tokenizer, str(path), "gguf", blocks=blocks)


def tensor_groups(file: GGUFFile) -> dict[str, dict[int, GGUFTensor]]:
    """The file's tensors by the tenor tensor they make, each by its piece's index in it."""
    groups: dict[str, dict[int, GGUFTensor]] = {}
    for tensor in file.tensors.values():
        name, index = _tenor_name(file.path, tensor.name)
        groups.setdefault(name, {})[index] = tensor
    return groups


class GGUFMetadata:
    """Typed access to GGUF key/values; errors name the file and the key."""

    def __init__(self, file: GGUFFile) -> None:
        self.path = file.path
        self._file = file

    def _scalar(self, key: str) -> int | float | str | None:
        value = self._file.metadata.get(key)
        if value is None:
            return None
        if key in self._file.array_keys:
            raise CheckpointError(f"{self.path}: GGUF metadata {key} is an array (per-layer values); not supported")
        if isinstance(value, float) and float(np.float32(value)) == value:
            # 1e-5 stored as float32 reads 9.99999974e-06: keep the shortest decimal that round-trips.
            return float(str(np.float32(value)))
        return value  # type: ignore[return-value]

    def _typed(self, key: str, kind: type, default: object) -> object:
        value = self._scalar(key)
        if value is None:
            if default is None:
                raise CheckpointError(f"{self.path}: GGUF metadata {key} is missing")
            return default
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise CheckpointError(f"{self.path}: GGUF metadata {key} should be {kind.__name__}, got {value!r}")
        return value

    def get_int(self, key: str, default: int | None = None) -> int:
        return self._typed(key, int, default)  # type: ignore[return-value]

    def get_float(self, key: str, default: float | None = None) -> float:
        return self._typed(key, float, default)  # type: ignore[return-value]

    def get_str(self, key: str, default: str | None = None) -> str:
        return self._typed(key, str, default)  # type: ignore[return-value]

    def optional_int(self, key: str) -> int | None:
        return self.get_int(key) if key in self._file.metadata else None


def gguf_config(meta: GGUFMetadata, tensors: dict[str, GGUFTensor]) -> ModelConfig:
    arch = meta.get_str("general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{meta.path}: GGUF architecture {arch!r} is not supported; tenor imports llama")
    if "rope_freqs.weight" in tensors:
        raise CheckpointError(f"{meta.path}: llama3-style rope_freqs in GGUF is not supported")
    d = meta.get_int("llama.embedding_length")
    heads = meta.get_int("llama.attention.head_count")
    if d <= 0 or heads <= 0:  # checked before the division below
        raise CheckpointError(f"{meta.path}: embedding_length and head_count must be positive, got {d} and {heads}")
    head_dim = meta.get_int("llama.attention.key_length", d // heads)
    rotary = meta.get_int("llama.rope.dimension_count", head_dim)
    if rotary != head_dim:
        raise CheckpointError(f"{meta.path}: partial rotary ({rotary} of {head_dim} dims) is not supported")
    embed = tensors.get("token_embd.weight")
    if embed is None:
        raise CheckpointError(f"{meta.path}: tensor token_embd.weight is missing")
    eos = tuple(
        dict.fromkeys(  # end-of-turn ids end generation too (Llama 3's eot / eom)
            i
            for k in ("eos_token_id", "eot_token_id", "eom_token_id")
            if (i := meta.optional_int(f"tokenizer.ggml.{k}")) is not None
        )
    )
    try:
        return ModelConfig(
            arch="llama",
            vocab_size=embed.dims[1],
            hidden_size=d,
            intermediate_size=meta.get_int("llama.feed_forward_length"),
            num_layers=meta.get_int("llama.block_count"),
            num_heads=heads,
            num_kv_heads=meta.get_int("llama.attention.head_count_kv", heads),
            head_dim=head_dim,
            max_position_embeddings=meta.get_int("llama.context_length", 2048),
            norm_eps=meta.get_float("llama.attention.layer_norm_rms_epsilon"),
            rope_theta=meta.get_float("llama.rope.freq_base", 10000.0),
            rope_scaling=_rope_scaling(meta),
            tie_word_embeddings="output.weight" not in tensors,
            bos_token_id=meta.optional_int("tokenizer.ggml.bos_token_id"),
            eos_token_ids=eos,
        )
    except ValueError as exc:
        raise CheckpointError(f"{meta.path}: {exc}") from None


def _rope_scaling(meta: GGUFMetadata) -> RopeScaling | None:
    kind = meta.get_str("llama.rope.scaling.type", "none")
    if kind == "none":
        return None
    if kind == "linear":
        return RopeScaling("linear", factor=meta.get_float("llama.rope.scaling.factor"))
    raise CheckpointError(f"{meta.path}: rope scaling {kind!r} is not supported; tenor supports linear")


def _tenor_name(path: Path, gguf_name: str) -> tuple[str, int]:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name], 0
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        name, index = _LAYER_NAMES[parts[2]]
        return f"layers.{parts[1]}.{name}", index
    raise CheckpointError(f"{path}: unexpected tensor {gguf_name} for a llama model")


def read_weight(file: GGUFFile, config: ModelConfig, name: str, parts: dict[int, GGUFTensor]) -> torch.Tensor:
    """One tenor tensor, float32, from its GGUF piece(s).

    Quantized rows are self-contained (each row is whole blocks), so q/k rows are reordered
    and pieces stacked on the raw data, and one dequantize call makes the fused tensor.
    """
    path = file.path
    shape = float_specs(config)[name].shape
    tensors, raws = _raw_pieces(file, config, name, parts)
    if len({t.tensor_type for t in tensors}) == 1:
        data = raws[0] if len(raws) == 1 else np.concatenate(raws)
        values = _dequantize(path, tensors[0], data).reshape(shape)
    else:  # mixed types (e.g. Q4_K_M keeps attn_v at Q6_K): dequantize each, then stack
        values = np.concatenate([_dequantize(path, t, d).reshape(d.shape[0], -1) for t, d in zip(tensors, raws)])
        values = values.reshape(shape)
    if not values.flags.writeable:  # an F32 tensor is a read-only view of the mapped file
        values = values.copy()
    return torch.from_numpy(values)


def read_blocks(file: GGUFFile, config: ModelConfig, name: str, parts: dict[int, GGUFTensor]) -> Blocks | None:
    """One tenor weight as its blocks read, where each GGUF piece is of a type whose every 32
    values share a step and an offset (gguf_blocks.BLOCK_TYPES: Q4_0, Q4_1, Q4_K as NibbleBlocks,
    and with Q5_0, Q5_1, Q5_K or Q8_0 among them as ByteBlocks), else None: no float copy, and
    the steps and offsets are the file's own."""
    if not parts or any(t.tensor_type not in BLOCK_TYPES for t in parts.values()):
        return None
    tensors, raws = _raw_pieces(file, config, name, parts)
    return as_blocks([(t.tensor_type, raw) for t, raw in zip(tensors, raws)])


def read_rows(file: GGUFFile, config: ModelConfig, name: str, parts: dict[int, GGUFTensor]) -> PackedRows | None:
    """An embedding in one piece of a type that read_blocks leaves (Q6_K, the 2- and 3-bit and IQ
    types, F16, BF16) as its rows' own bytes, dequantized as they are looked up; None for F32 or
    F64, whose rows are float32's size or more. CheckpointError for a type tenor cannot
    dequantize, as the float path gives."""
    if len(parts) != 1 or parts[0].tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F64):
        return None
    tensors, raws = _raw_pieces(file, config, name, parts)
    path, tensor = file.path, tensors[0]

    def decode(raw: np.ndarray) -> np.ndarray:
        return _dequantize(path, tensor, raw)

    rows = PackedRows(torch.from_numpy(np.array(raws[0])), float_specs(config)[name].shape[1], decode)
    rows.rows(torch.zeros(1, dtype=torch.long))  # a type without a dequantizer fails here, at load
    return rows


def _raw_pieces(
    file: GGUFFile, config: ModelConfig, name: str, parts: dict[int, GGUFTensor]
) -> tuple[list[GGUFTensor], list[np.ndarray]]:
    """The GGUF pieces of tenor tensor `name`, in order, with their raw rows (q/k rows reordered
    for rotate-half); CheckpointError for a missing or mis-shaped piece."""
    path = file.path
    shape = float_specs(config)[name].shape
    rows = piece_rows(config, name)
    tensors, raws = [], []
    for i, count in enumerate(rows):
        if i not in parts:
            raise CheckpointError(f"{path}: missing tensor {_gguf_name(name, i)}")
        tensor = parts[i]
        if tensor.shape != (count, *shape[1:]):
            raise CheckpointError(
                f"{path}: tensor {tensor.name} has shape {list(tensor.shape)}, "
                f"expected {[count, *shape[1:]]} for the model config"
            )
        data = file.data(tensor)
        if tensor.name.endswith((".attn_q.weight", ".attn_k.weight")):
            heads = config.num_heads if ".attn_q." in tensor.name else config.num_kv_heads
            data = data[rotary_row_order(count, heads)]
        tensors.append(tensor)
        raws.append(data)
    return tensors, raws


def rotary_row_order(rows: int, heads: int) -> np.ndarray:
    """Indices that take llama.cpp's interleaved q/k rows to rotate-half rows:
    output row (head, half, j) is input row (head, j, half)."""
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(0, 2, 1).reshape(-1)


def _dequantize(path: Path, tensor: GGUFTensor, data: np.ndarray) -> np.ndarray:
    qtype = tensor.tensor_type
    try:
        if qtype in BLOCK_TYPES:  # in torch's whole-tensor ops: gguf.quants took ~1 s on the default model
            values = dequantize_blocks(data, qtype)
        elif qtype == GGMLQuantizationType.Q8_K:
            values = _dequantize_q8_k(data)
        elif qtype == GGMLQuantizationType.F64:
            values = data.astype(np.float32)
        else:
            values = dequantize(data, qtype)
    except NotImplementedError:
        raise CheckpointError(
            f"{path}: tensor {tensor.name} has GGUF type {qtype.name}, which tenor cannot import; "
            "supported: F32, F16, BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q8_K and the IQ types"
        ) from None
    return np.asarray(values, dtype=np.float32)


def _dequantize_q8_k(data: np.ndarray) -> np.ndarray:
    # Q8_K block (256 values, 292 bytes): float32 scale, 256 int8 quants, 16 int16 partial sums.
    blocks = data.reshape(-1, 292)
    scale = blocks[:, :4].copy().view(np.float32)
    quants = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (quants * scale).reshape(*data.shape[:-1], -1)


def _gguf_name(name: str, index: int) -> str:
    """The GGUF name of piece `index` of tenor tensor `name` (for messages)."""
    for gguf_name, tenor_name in _GLOBAL_NAMES.items():
        if tenor_name == name:
            return gguf_name
    layer, rest = name.split(".", 2)[1:]
    suffix = next(k for k, v in _LAYER_NAMES.items() if v == (rest, index))
    return f"blk.{layer}.{suffix}"

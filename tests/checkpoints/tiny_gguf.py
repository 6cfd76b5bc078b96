"""Tiny llama GGUF files written the way llama.cpp's converter writes them (q/k rows
interleaved per head), and a smaller copy of a real GGUF for slow reference loaders."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

# HF name (after "model.layers.{i}.") -> GGUF name (after "blk.{i}.")
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to q/k rows: within each head, row
    (half, j) moves to (j, half), so rotary pairs become adjacent rows."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_llama_gguf(
    path: Path,
    hf: dict[str, torch.Tensor],
    *,
    heads: int,
    kv_heads: int,
    ffn: int,
    qtypes: dict[str, gguf.GGMLQuantizationType] | None = None,
    extra: dict[str, np.ndarray] | None = None,
    arch: str = "llama",
) -> None:
    """A GGUF of the 2-layer HF llama state dict `hf`; qtypes: GGUF tensor suffix -> type."""
    qtypes = qtypes or {}
    embed = hf["model.embed_tokens.weight"].numpy()
    vocab, d = embed.shape
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.embedding_length", d)
    w.add_uint32(f"{arch}.block_count", 2)
    w.add_uint32(f"{arch}.feed_forward_length", ffn)
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", kv_heads)
    w.add_uint32(f"{arch}.context_length", 256)
    w.add_float32(f"{arch}.rope.freq_base", 50000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    tensors = {"token_embd.weight": embed, "output_norm.weight": hf["model.norm.weight"].numpy()}
    if "lm_head.weight" in hf:
        tensors["output.weight"] = hf["lm_head.weight"].numpy()
    for i in range(2):
        for hf_name, gguf_name in LAYER_NAMES.items():
            value = hf[f"model.layers.{i}.{hf_name}"].numpy()
            if gguf_name == "attn_q.weight":
                value = llama_cpp_permute(value, heads)
            elif gguf_name == "attn_k.weight":
                value = llama_cpp_permute(value, kv_heads)
            tensors[f"blk.{i}.{gguf_name}"] = value
    tensors.update(extra or {})
    for name, value in tensors.items():
        qtype = next((t for suffix, t in qtypes.items() if name.endswith(suffix)), None)
        if qtype is None:
            w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(value.astype(np.float32), qtype), raw_dtype=qtype)
    _finish(w)


def copy_gguf(
    src: Path,
    dst: Path,
    *,
    layers: int | None = None,
    drop_arrays: bool = False,
    drop_keys: tuple[str, ...] = (),
    replace: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]] | None = None,
) -> None:
    """`src` rewritten: cut to its first `layers` blocks, without array metadata (the
    tokenizer vocabularies) or some keys, or with some tensors' raw data and type replaced."""
    reader = gguf.GGUFReader(src)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    w = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys:
            continue
        if drop_arrays and field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        value = layers if key == f"{arch}.block_count" and layers else field.contents()
        w.add_key_value(key, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in reader.tensors:
        if layers and t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers:
            continue
        data, qtype = (replace or {}).get(t.name, (np.array(t.data), t.tensor_type))
        if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=qtype)
    _finish(w)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

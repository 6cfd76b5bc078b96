"""Tiny random HF models written the ways real checkpoints are (safetensors, sharded,
pytorch_model.bin), plus the tenor <- HF name map written out by hand for the tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def make_llama(
    dst: Path,
    *,
    tie: bool = False,
    rope: dict | None = LLAMA3_ROPE,
    layout: str = "safetensors",
    arch: str = "llama",
    seed: int = 0,
    **overrides,
) -> dict[str, torch.Tensor]:
    """A 2-layer GQA llama (4 heads, 2 kv heads) at `dst`; returns its HF state dict."""
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=50000.0,
        tie_word_embeddings=tie,
        bos_token_id=1,
        eos_token_id=[2, 3],
        rms_norm_eps=1e-5,
    )
    if rope is not None:
        kwargs["rope_scaling"] = dict(rope)
    kwargs.update(overrides)
    if arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**kwargs))
    else:
        model = LlamaForCausalLM(LlamaConfig(**kwargs))
    _save(model, dst, layout)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def make_gptj(dst: Path, *, layout: str = "safetensors", seed: int = 0) -> dict[str, torch.Tensor]:
    """A 2-layer GPT-J (4 heads of 8, rotary_dim 4) at `dst`; returns its HF state dict."""
    from transformers import GPTJConfig, GPTJForCausalLM

    torch.manual_seed(seed)
    model = GPTJForCausalLM(
        GPTJConfig(
            vocab_size=96, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=128, bos_token_id=1, eos_token_id=2
        )
    )
    _save(model, dst, layout)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _save(model, dst: Path, layout: str) -> None:
    if layout == "safetensors":
        model.save_pretrained(dst)
    elif layout == "safetensors-sharded":
        model.save_pretrained(dst, max_shard_size="20KB")
    elif layout in ("bin", "bin-sharded"):
        # transformers 5 writes only safetensors; old checkpoints look like this.
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(dst)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight")
        if layout == "bin":
            torch.save(state, dst / "pytorch_model.bin")
            return
        names = sorted(state)
        halves = [names[: len(names) // 2], names[len(names) // 2 :]]
        weight_map = {}
        for i, half in enumerate(halves, start=1):
            filename = f"pytorch_model-{i:05d}-of-00002.bin"
            torch.save({k: state[k] for k in half}, dst / filename)
            weight_map.update(dict.fromkeys(half, filename))
        (dst / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        raise ValueError(layout)


def llama_pieces(num_layers: int, tied: bool) -> dict[str, list[str]]:
    """tenor name -> HF names stacked into it, in order (written independently of tenor's map)."""
    m: dict[str, list[str]] = {"embed.weight": ["model.embed_tokens.weight"], "norm.weight": ["model.norm.weight"]}
    for i in range(num_layers):
        h = f"model.layers.{i}"
        m[f"layers.{i}.attn_norm.weight"] = [f"{h}.input_layernorm.weight"]
        m[f"layers.{i}.attn.qkv.weight"] = [f"{h}.self_attn.{x}_proj.weight" for x in "qkv"]
        m[f"layers.{i}.attn.o.weight"] = [f"{h}.self_attn.o_proj.weight"]
        m[f"layers.{i}.mlp_norm.weight"] = [f"{h}.post_attention_layernorm.weight"]
        m[f"layers.{i}.mlp.gate_up.weight"] = [f"{h}.mlp.gate_proj.weight", f"{h}.mlp.up_proj.weight"]
        m[f"layers.{i}.mlp.down.weight"] = [f"{h}.mlp.down_proj.weight"]
    if not tied:
        m["lm_head.weight"] = ["lm_head.weight"]
    return m


def gptj_pieces(num_layers: int) -> dict[str, list[str]]:
    m: dict[str, list[str]] = {
        "embed.weight": ["transformer.wte.weight"],
        "ln_f.weight": ["transformer.ln_f.weight"],
        "ln_f.bias": ["transformer.ln_f.bias"],
        "lm_head.weight": ["lm_head.weight"],
        "lm_head.bias": ["lm_head.bias"],
    }
    for i in range(num_layers):
        h = f"transformer.h.{i}"
        m[f"layers.{i}.ln.weight"] = [f"{h}.ln_1.weight"]
        m[f"layers.{i}.ln.bias"] = [f"{h}.ln_1.bias"]
        m[f"layers.{i}.attn.qkv.weight"] = [f"{h}.attn.{x}_proj.weight" for x in "qkv"]
        m[f"layers.{i}.attn.o.weight"] = [f"{h}.attn.out_proj.weight"]
        for part in ("fc_in", "fc_out"):
            for kind in ("weight", "bias"):
                m[f"layers.{i}.mlp.{part}.{kind}"] = [f"{h}.mlp.{part}.{kind}"]
    return m


def assert_matches_hf(
    weights: dict[str, torch.Tensor], hf: dict[str, torch.Tensor], pieces: dict[str, list[str]]
) -> None:
    """Every tenor tensor equals the HF tensors it was made from, fused pieces sliced back."""
    assert set(weights) == set(pieces)
    for name, sources in pieces.items():
        offset = 0
        for source in sources:
            rows = hf[source].shape[0]
            piece = weights[name][offset : offset + rows]
            assert torch.equal(piece.to(hf[source].dtype), hf[source]), f"{name} rows {offset}.. != {source}"
            offset += rows
        assert offset == weights[name].shape[0], f"{name} has rows beyond its pieces"

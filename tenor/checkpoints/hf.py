"""Import an HF transformers model directory (Llama, Mistral, GPT-J) under tenor's names.

HF Llama/Mistral q and k rows are already in the rotate-half layout tenor uses, and HF
GPT-J's in the rotate-every-two layout tenor's GPT-J uses, so weights are only renamed and
stacked (q,k,v -> qkv; gate,up -> gate_up), never permuted.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from tenor.checkpoints.format import (
    LoadedCheckpoint,
    has_tokenizer_files,
    read_json_object,
    read_safetensors,
    weight_files,
)
from tenor.checkpoints.layout import check_shape, check_weights, float_specs, piece_rows
from tenor.errors import CheckpointError
from tenor.models.config import ModelConfig, RopeScaling

ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "GPTJForCausalLM": "gptj"}
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "gptj": "gptj"}  # when "architectures" is absent
# Buffers some HF versions saved alongside the parameters; they carry no weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq", "attn.bias", "attn.masked_bias")


def is_hf_directory(path: Path) -> bool:
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format_version" not in data and ("architectures" in data or "model_type" in data)


def load_hf(path: str | Path) -> LoadedCheckpoint:
    """Read an HF model directory; raises CheckpointError naming the file and the problem."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such model directory")
    config = read_hf_config(path)
    raw = read_hf_tensors(path)
    weights = map_hf_weights(str(path), config, raw)
    check_weights(str(path), config, weights)
    tokenizer = path if has_tokenizer_files(path) else None
    return LoadedCheckpoint(config, weights, None, tokenizer, str(path), "hf")


def read_hf_config(path: Path) -> ModelConfig:
    file = path / "config.json"
    data = read_json_object(file)
    architectures = data.get("architectures") or []
    if architectures:
        arch = next((ARCHITECTURES[a] for a in architectures if a in ARCHITECTURES), None)
    else:
        arch = MODEL_TYPES.get(data.get("model_type", ""))
    if arch is None:
        raise CheckpointError(
            f"{file}: unsupported architecture {architectures or data.get('model_type')!r}; "
            f"tenor imports {', '.join(ARCHITECTURES)}"
        )
    eos = _token_ids(data.get("eos_token_id"))
    generation = path / "generation_config.json"
    if generation.is_file():  # Llama 3 lists its end-of-turn ids only here
        eos += tuple(i for i in _token_ids(read_json_object(generation).get("eos_token_id")) if i not in eos)
    try:
        fields = _llama_fields(file, data) if arch == "llama" else _gptj_fields(file, data)
        return ModelConfig(
            arch=arch,
            bos_token_id=data.get("bos_token_id"),
            eos_token_ids=eos,
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            **fields,
        )
    except KeyError as exc:
        raise CheckpointError(f"{file}: missing key {exc}") from None
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{file}: {exc}") from None


def _token_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def _llama_fields(file: Path, data: dict[str, Any]) -> dict[str, Any]:
    if data.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{file}: hidden_act {data['hidden_act']!r} is not supported (tenor's llama uses silu)")
    if data.get("attention_bias") or data.get("mlp_bias"):
        raise CheckpointError(f"{file}: attention_bias / mlp_bias are not supported by tenor's llama")
    max_positions = data["max_position_embeddings"]
    window = data.get("sliding_window")
    if window is not None and window < max_positions:
        raise CheckpointError(
            f"{file}: sliding_window {window} < max_position_embeddings {max_positions} is not supported"
        )
    heads = _positive_int(file, data, "num_attention_heads")
    _positive_int(file, data, "hidden_size")
    theta, scaling = _rope(file, data)
    return dict(
        vocab_size=data["vocab_size"],
        hidden_size=data["hidden_size"],
        intermediate_size=data["intermediate_size"],
        num_layers=data["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=data.get("num_key_value_heads") or heads,
        head_dim=data.get("head_dim") or data["hidden_size"] // heads,
        max_position_embeddings=max_positions,
        norm_eps=float(data.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
    )


def _positive_int(file: Path, data: dict[str, Any], key: str) -> int:
    """A config value that later arithmetic divides by: checked here, before any division."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{file}: {key} must be a positive integer, got {value!r}")
    return value


def _rope(file: Path, data: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """transformers 5 writes `rope_parameters` (theta included); older files `rope_theta` + `rope_scaling`."""
    params = data.get("rope_parameters") or {}
    theta = float(params.get("rope_theta", data.get("rope_theta", 10000.0)))
    scaling = params if "rope_type" in params else (data.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling("linear", factor=float(scaling["factor"]))
    if kind == "llama3":
        return theta, RopeScaling(
            "llama3",
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        )
    raise CheckpointError(f"{file}: rope scaling {kind!r} is not supported; tenor supports llama3 and linear")


def _gptj_fields(file: Path, data: dict[str, Any]) -> dict[str, Any]:
    if data.get("activation_function", "gelu_new") != "gelu_new":
        raise CheckpointError(f"{file}: activation_function {data['activation_function']!r} is not supported")
    d, heads = _positive_int(file, data, "n_embd"), _positive_int(file, data, "n_head")
    head_dim = d // heads
    return dict(
        vocab_size=data["vocab_size"],
        hidden_size=d,
        intermediate_size=data.get("n_inner") or 4 * d,
        num_layers=data["n_layer"],
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=head_dim,
        rotary_dim=data.get("rotary_dim") or head_dim,
        max_position_embeddings=data["n_positions"],
        norm_eps=float(data.get("layer_norm_epsilon", 1e-5)),
        rope_theta=10000.0,
    )


def hf_name_map(config: ModelConfig) -> dict[str, tuple[str, ...]]:
    """tenor name -> the HF names stacked (in order) to make it."""
    names: dict[str, tuple[str, ...]] = {}
    for i in range(config.num_layers):
        if config.arch == "llama":
            p, a, m = f"model.layers.{i}.", f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            names.update(
                {
                    f"layers.{i}.attn_norm.weight": (p + "input_layernorm.weight",),
                    f"layers.{i}.attn.qkv.weight": (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                    f"layers.{i}.attn.o.weight": (a + "o_proj.weight",),
                    f"layers.{i}.mlp_norm.weight": (p + "post_attention_layernorm.weight",),
                    f"layers.{i}.mlp.gate_up.weight": (m + "gate_proj.weight", m + "up_proj.weight"),
                    f"layers.{i}.mlp.down.weight": (m + "down_proj.weight",),
                }
            )
        else:
            p, a = f"transformer.h.{i}.", f"transformer.h.{i}.attn."
            names.update(
                {
                    f"layers.{i}.attn.qkv.weight": (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                    f"layers.{i}.attn.o.weight": (a + "out_proj.weight",),
                }
            )
            for suffix in ("ln.weight", "ln.bias"):
                names[f"layers.{i}.{suffix}"] = (p + suffix.replace("ln", "ln_1"),)
            for suffix in ("fc_in.weight", "fc_in.bias", "fc_out.weight", "fc_out.bias"):
                names[f"layers.{i}.mlp.{suffix}"] = (p + "mlp." + suffix,)
    if config.arch == "llama":
        names.update({"embed.weight": ("model.embed_tokens.weight",), "norm.weight": ("model.norm.weight",)})
    else:
        names.update(
            {
                "embed.weight": ("transformer.wte.weight",),
                "ln_f.weight": ("transformer.ln_f.weight",),
                "ln_f.bias": ("transformer.ln_f.bias",),
                "lm_head.bias": ("lm_head.bias",),
            }
        )
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = ("lm_head.weight",)
    position = {name: i for i, name in enumerate(float_specs(config))}
    return dict(sorted(names.items(), key=lambda item: position[item[0]]))


def map_hf_weights(where: str, config: ModelConfig, raw: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename and stack HF tensors into tenor's; refuses missing, extra or mis-shaped ones."""
    names = hf_name_map(config)
    used = {source for sources in names.values() for source in sources}
    if config.tie_word_embeddings:
        used.add("lm_head.weight")  # some exporters keep the tied copy; the embedding is the truth
    extra = sorted(n for n in raw if n not in used and not n.endswith(_IGNORED_SUFFIXES))
    if extra:
        raise CheckpointError(f"{where}: unexpected tensor {extra[0]} for a {config.arch} model with this config")
    specs = float_specs(config)
    weights: dict[str, torch.Tensor] = {}
    for name, sources in names.items():
        pieces = []
        for source, rows in zip(sources, piece_rows(config, name)):
            if source not in raw:
                raise CheckpointError(f"{where}: missing tensor {source}")
            check_shape(where, source, raw[source], (rows, *specs[name].shape[1:]))
            pieces.append(raw[source])
        weights[name] = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    return weights


def read_hf_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's safetensors files, or else of its pytorch_model*.bin files."""
    if (path / "model.safetensors.index.json").is_file():
        return read_safetensors(path, weight_files(path))
    files = sorted(path.glob("*.safetensors"))
    if files:
        return read_safetensors(path, files)
    if (path / "pytorch_model.bin.index.json").is_file():
        files = weight_files(path, "pytorch_model.bin.index.json", "pytorch_model.bin")
    else:
        files = sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors or pytorch_model*.bin weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(_read_torch_file(file))
    return weights


def _read_torch_file(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise CheckpointError(f"{file}: missing (listed in the index)")
    try:
        # weights_only: a restricted unpickler that builds tensors and containers, never code.
        data = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, OSError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{file}: not a readable PyTorch weights file ({first_line})") from None
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise CheckpointError(f"{file}: expected a flat dict of tensors")
    return data

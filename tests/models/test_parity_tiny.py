"""Tiny random HF models -> `tenor convert` -> tenor's logits equal HF's (float32)."""

import pytest
import torch
import transformers

from tenor.checkpoints.convert import convert
from tenor.checkpoints.format import load_checkpoint
from tenor.models.model import build_model
from tests.models.single_sequence import prefill_logits, stepwise_logits

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def hf_llama(tie: bool, rope_scaling) -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=50000.0,
        rms_norm_eps=1e-6,
        rope_scaling=rope_scaling,
        tie_word_embeddings=tie,
    )
    return transformers.LlamaForCausalLM(config)


def hf_mistral() -> transformers.PreTrainedModel:
    config = transformers.MistralConfig(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=None,
        rms_norm_eps=1e-5,
    )
    return transformers.MistralForCausalLM(config)


def hf_gptj() -> transformers.PreTrainedModel:
    config = transformers.GPTJConfig(
        vocab_size=320, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256, tie_word_embeddings=False
    )
    return transformers.GPTJForCausalLM(config)


CASES = {
    "llama3-gqa-rope-scaling": lambda: hf_llama(tie=False, rope_scaling=LLAMA3_ROPE),
    "llama2-tied": lambda: hf_llama(tie=True, rope_scaling=None),
    "mistral": hf_mistral,
    "gptj": hf_gptj,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = CASES[request.param]().eval()
    with torch.no_grad():  # HF inits some weights to zero or one: perturb so every path matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    root = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(root / "hf")
    convert(root / "hf", root / "tenor", dtype="float32", progress=False)
    loaded = load_checkpoint(root / "tenor")
    return hf, build_model(loaded.config, loaded.weights, torch.float32)


def test_full_prompt_logits_match(pair):
    hf, model = pair
    ids = torch.randint(0, 320, (70,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    got = prefill_logits(model, ids)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


def test_cached_step_by_step_logits_match(pair):
    hf, model = pair
    ids = torch.randint(0, 320, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    got = stepwise_logits(model, ids, first=37)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)

"""The embedding table a 16-bit checkpoint keeps under float32 activations (decoder.lookup_table):
half the bytes, the same rows and logits as the table widened at load."""

import dataclasses

import pytest
import torch

from tenor.models.decoder import lookup_table
from tenor.models.model import build_model, random_weights
from tenor.registry import TINY_GPTJ, TINY_LLAMA
from tests.models.single_sequence import prefill_logits

TIED_LLAMA = dataclasses.replace(TINY_LLAMA, tie_word_embeddings=True)
IDS = [1, 7, 200, 33, 258, 5, 5, 90, 14, 3, 250, 61]


def sixteen_bit(config, dtype):
    weights = random_weights(config, 5)
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    return {name: w.to(dtype) for name, w in weights.items()}


@pytest.mark.parametrize("source", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", [TIED_LLAMA, TINY_LLAMA, TINY_GPTJ], ids=["llama-tied", "llama", "gptj"])
@pytest.mark.parametrize("weight_format", ["dense", "int8"])
def test_sixteen_bit_table_gives_the_widened_tables_logits(config, source, weight_format):
    weights = sixteen_bit(config, source)
    widened = {name: w.float() for name, w in weights.items()}
    narrow = build_model(config, weights, torch.float32, weight_format)
    wide = build_model(config, widened, torch.float32, weight_format)
    kept_by_head = config.tie_word_embeddings and weight_format == "dense"
    assert narrow.embed.dtype == (torch.float32 if kept_by_head else source)
    assert wide.embed.dtype == torch.float32
    ids = torch.tensor(IDS)
    rows = narrow.embed_tokens(ids)
    assert rows.dtype == torch.float32
    assert torch.equal(rows, widened["embed.weight"][ids])
    assert torch.equal(prefill_logits(narrow, IDS), prefill_logits(wide, IDS))


def test_tied_float_head_and_lookups_share_one_table():
    model = build_model(TIED_LLAMA, sixteen_bit(TIED_LLAMA, torch.bfloat16), torch.float32, "dense")
    kernel = model.lm_head.kernel
    held = getattr(kernel, "q", None) if hasattr(kernel, "q") else getattr(kernel, "weight", None)
    if held is None or held.dtype != torch.float32:
        pytest.skip(f"this CPU's float head ({type(kernel).__name__}) keeps a packed copy, not the table")
    assert model.embed.data_ptr() == held.data_ptr()


def test_lookup_table_keeps_only_sixteen_bit_cpu_tables_narrow():
    bf16 = torch.randn(8, 4).bfloat16()
    assert lookup_table(bf16, torch.float32, kept_by_head=False) is bf16
    assert lookup_table(bf16, torch.float32, kept_by_head=True).dtype == torch.float32
    assert lookup_table(bf16, torch.bfloat16, kept_by_head=False).dtype == torch.bfloat16
    assert lookup_table(bf16.float(), torch.float32, kept_by_head=False).dtype == torch.float32
    assert lookup_table(bf16.float(), torch.bfloat16, kept_by_head=False).dtype == torch.bfloat16

"""Accuracy of the int8 options on the default model, against bf16:

- int8 weights (`tenor convert --quantize int8`): logit error and top-1 agreement, teacher-forced
  over every position of a few texts, and greedy agreement over 32 generated tokens;
- int8 KV cache (`--quantize-kv-cache`): greedy agreement and score error through the engine.

    python benchmarks/accuracy.py [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json

import torch

from tenor import registry
from tenor.checkpoints.default_model import default_gguf_path
from tenor.checkpoints.loader import load_any
from tenor.checkpoints.quantize import quantize_weights
from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.factory import EngineOptions
from tenor.engine.llm_engine import LLMEngine
from tenor.models.layers import AttentionBatch, PagedKVCache, PrefillSpan
from tenor.models.model import build_model
from tenor.tokenizer import load_tokenizer

TEXTS = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg",
    "def quicksort(items):\n    if len(items) <= 1:\n        return items\n",
    "Photosynthesis is the process by which green plants use sunlight to",
    "My favourite recipe for a rainy day is a thick vegetable soup with",
]


@torch.inference_mode()
def teacher_forced_logits(model, ids: list[int]) -> torch.Tensor:
    c = model.config
    cache = PagedKVCache(c.num_layers, -(-len(ids) // 16), 16, c.num_kv_heads, c.head_dim, model.embed.dtype)
    n = len(ids)
    batch = AttentionBatch(torch.arange(n), 0, None, None, [PrefillSpan(0, n, 0, None)])
    return model(torch.tensor(ids), torch.arange(n), cache, batch, torch.arange(n))


def weight_quantization_report(tokenizer) -> dict:
    loaded = load_any(default_gguf_path())
    bf16 = build_model(loaded.config, loaded.weights, torch.bfloat16)
    int8 = build_model(loaded.config, quantize_weights(loaded.weights, loaded.config), torch.bfloat16)
    errors, agree, total = [], 0, 0
    for text in TEXTS:
        ids = tokenizer.encode(text)
        a, b = teacher_forced_logits(bf16, ids), teacher_forced_logits(int8, ids)
        errors.append((a - b).abs().max().item())
        agree += (a.argmax(-1) == b.argmax(-1)).sum().item()
        total += len(ids)
    return {"max_abs_logit_error": max(errors), "teacher_forced_top1_agreement": agree / total,
            "logit_scale_max_abs": teacher_forced_logits(bf16, tokenizer.encode(TEXTS[0])).abs().max().item()}


async def greedy(servable, checkpoint, options: EngineOptions, prompts: list[list[int]]) -> list[list[int]]:
    engine = LLMEngine(servable, checkpoint, options)
    await engine.start()
    out = []
    for i, ids in enumerate(prompts):
        request = GenerateRequest(f"a{i}", tuple(ids), SamplingParams(max_tokens=32, ignore_eos=True))
        out.append([t async for o in engine.generate(request) for d in o.deltas for t in d.token_ids])
    await engine.stop()
    return out


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Share of samples equal in full, and mean length of the common prefix."""
    prefixes = []
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        prefixes.append(n)
    return {"identical_samples": sum(x == y for x, y in zip(a, b)) / len(a),
            "mean_common_prefix_tokens": sum(prefixes) / len(prefixes), "tokens_per_sample": 32}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json-out")
    parser.add_argument("--int8-checkpoint", help="a `tenor convert --quantize int8` of the default model")
    args = parser.parse_args()
    tokenizer = load_tokenizer(default_gguf_path())
    prompts = [tokenizer.encode(t) for t in TEXTS]
    servable = registry.get("llama.SmolLM2_135M_Instruct")
    options = EngineOptions(kv_cache_bytes=256 << 20, warmup=False)
    report = {"int8_weights": weight_quantization_report(tokenizer)}
    base = asyncio.run(greedy(servable, None, options, prompts))
    if args.int8_checkpoint:
        quant = asyncio.run(greedy(servable, args.int8_checkpoint, options, prompts))
        report["int8_weights"]["greedy"] = agreement(base, quant)
    kv8 = asyncio.run(greedy(servable, None, EngineOptions(kv_cache_bytes=256 << 20, warmup=False,
                                                            quantize_kv_cache=True), prompts))
    report["int8_kv_cache"] = {"greedy": agreement(base, kv8)}
    print(json.dumps(report, indent=2))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()

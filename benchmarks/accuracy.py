"""Accuracy of each precision tenor can serve the default model with, against HF transformers in
float32 on the same GGUF (the reference of the correctness tests):

- teacher-forced top-1 agreement: over every position of a few texts, fed one token a step
  through the decode path (so decode-only kernels, such as the int8 weights, and the K/V read
  back from the cache are what is measured), the share of positions whose most likely next
  token equals HF's; and the KL divergence of tenor's next-token distribution from HF's there,
  its mean and its largest (in nats), which sees every change of the distribution, not only
  the flips of near-ties that top-1 and greedy agreement count;
- prefill top-1 agreement: the same texts each as one prompt (the big-batch GEMMs), the share of
  positions whose most likely next token equals HF's, and the KL divergence there; and the
  top-1 agreement over the serving benchmark's first --bench-prompts prompts
  (tenor.bench.prompts: 40-300 words each, some thousands of positions, so that one flipped
  near-tie weighs little);
- greedy agreement: 32 greedy tokens through the engine for 10 prompts, how many equal HF's
  exactly, and the mean common prefix.

    python benchmarks/accuracy.py [--precisions float32/none,float32/fp16,float32/int8] [--device cpu|cuda]
                                  [--json-out FILE] [--as-cpu avx2|avx512] [--bench-prompts 16]
                                  [--gguf FILE]   # another GGUF of the same model (another type)

A precision is DTYPE/QUANTIZE as `tenor serve --dtype --quantize` take them; add `+kv8` for the
int8 KV cache (e.g. float32/int8+kv8).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cpu_proxy import narrow_to  # noqa: E402
from tenor import registry  # noqa: E402
from tenor.bench.prompts import make_prompts  # noqa: E402
from tenor.checkpoints.default_model import default_gguf_path  # noqa: E402
from tenor.engine.api import GenerateRequest, SamplingParams  # noqa: E402
from tenor.engine.factory import EngineOptions  # noqa: E402
from tenor.engine.llm_engine import LLMEngine  # noqa: E402
from tenor.engine.model_loader import load_model  # noqa: E402
from tenor.models.layers import AttentionBatch, PagedKVCache, PrefillSpan  # noqa: E402
from tenor.tokenizer import load_tokenizer  # noqa: E402

TEXTS = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg",
    "def quicksort(items):\n    if len(items) <= 1:\n        return items\n",
    "Photosynthesis is the process by which green plants use sunlight to",
    "My favourite recipe for a rainy day is a thick vegetable soup with",
    # added 2026-12-04 (fourth session): 61 positions made one flipped near-tie worth 1.6 %
    "The city council met on Tuesday evening to discuss the new bicycle lanes, which several shop owners",
    "import json\n\ndef load_config(path):\n    with open(path) as f:\n        return json.load(f)\n\n",
    "Water boils at a lower temperature on a mountain because the air pressure there is",
    "Dear Anna, thank you for the lovely letter. The garden is finally blooming and the children",
    "In mathematics, a prime number is a natural number greater than one that has no divisors other than",
    "The old lighthouse keeper climbed the spiral stairs every night, counting the steps as he",
    "SELECT name, COUNT(*) FROM orders WHERE created_at > '2024-01-01' GROUP BY name ORDER BY",
    "Researchers found that students who slept at least eight hours before an exam scored",
]
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "List three colors:",
    "The three laws of thermodynamics are",
    "Question: What is the boiling point of water at sea level?\nAnswer:",
    "import numpy as np\n\ndef normalize(x):",
    "In 1969, astronauts Neil Armstrong and Buzz Aldrin became the first people to",
    "A good night's sleep is important because",
    "Translate to French: 'The weather is nice today.'\nFrench:",
]
NEW_TOKENS = 32
BLOCK = 16


@dataclasses.dataclass
class Reference:
    """HF float32's answers: logits over TEXTS, the most likely next token at every position of
    the benchmark prompts, and greedy continuations of PROMPTS."""

    text_logits: list[torch.Tensor]
    bench_prompts: list[list[int]]
    bench_top1: list[torch.Tensor]
    greedy: list[list[int]]


def hf_reference(tokenizer, bench_prompts: int, path: Path) -> Reference:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        logits = [model(torch.tensor([tokenizer.encode(t)])).logits[0] for t in TEXTS]
        bench = [tokenizer.encode(p) for p in make_prompts(bench_prompts)] if bench_prompts else []
        bench_top1 = [model(torch.tensor([ids])).logits[0].argmax(-1) for ids in bench]
        greedy = []
        for prompt in PROMPTS:
            ids = tokenizer.encode(prompt)
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
            )
            greedy.append(out[0, len(ids) :].tolist())
    return Reference(logits, bench, bench_top1, greedy)


def _cache(model, tokens: int, quantized_kv: bool, device: str) -> PagedKVCache:
    """A cache of just enough blocks for `tokens`, laid out for `model`."""
    c = model.config
    blocks = -(-tokens // BLOCK)
    return PagedKVCache(
        c.num_layers, blocks, BLOCK, c.num_kv_heads, c.head_dim, model.compute_dtype, quantized_kv, device
    )


@torch.inference_mode()
def stepwise_logits(model, ids: list[int], quantized_kv: bool, device: str = "cpu") -> torch.Tensor:
    """Logits [len(ids), V] on the CPU: the first token prefilled, every later one a decode step."""
    cache = _cache(model, len(ids), quantized_kv, device)
    table = torch.arange(cache.num_blocks)[None]
    at = torch.device(device)

    def run(ids_now: list[int], pos: int, batch: AttentionBatch) -> torch.Tensor:
        moved = [torch.tensor(x).to(at) for x in (ids_now, [pos], [0])]
        return model(moved[0], moved[1], cache, batch.to(at), moved[2]).cpu()

    first = AttentionBatch(torch.tensor([0]), 0, None, None, [PrefillSpan(0, 1, 0, None)], native=model.native_kernels)
    rows = [run(ids[:1], 0, first)]
    for pos in range(1, len(ids)):
        step = AttentionBatch(
            torch.tensor([pos]),
            1,
            table[:, : pos // BLOCK + 1],
            None,
            [],
            decode_span=pos + 1,
            decode_lengths=torch.tensor([pos + 1]),
            native=model.native_kernels,
        )
        rows.append(run([ids[pos]], pos, step))
    return torch.cat(rows)


@torch.inference_mode()
def prefill_logits(model, ids: list[int], quantized_kv: bool, device: str = "cpu") -> torch.Tensor:
    """Logits [len(ids), V] on the CPU from one prefill of the whole text: the big-batch path."""
    cache = _cache(model, len(ids), quantized_kv, device)
    n, at = len(ids), torch.device(device)
    batch = AttentionBatch(torch.arange(n), 0, None, None, [PrefillSpan(0, n, 0, None)], native=model.native_kernels)
    moved = [torch.tensor(x).to(at) for x in (ids, list(range(n)), list(range(n)))]
    return model(moved[0], moved[1], cache, batch.to(at), moved[2]).cpu()


async def engine_greedy(servable, checkpoint: str, options: EngineOptions, prompts: list[list[int]]) -> list[list[int]]:
    engine = LLMEngine(servable, checkpoint, options)
    await engine.start()
    try:
        out = []
        for i, ids in enumerate(prompts):
            request = GenerateRequest(f"a{i}", tuple(ids), SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
            out.append([t async for o in engine.generate(request) for d in o.deltas for t in d.token_ids])
        return out
    finally:
        await engine.stop()


def kl_divergence(reference: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(reference || tenor) in nats at each position of [T, V] logits, in float64."""
    ref = torch.log_softmax(reference.double(), dim=-1)
    ours = torch.log_softmax(logits.double().to(reference.device), dim=-1)
    return (ref.exp() * (ref - ours)).sum(-1)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def measure(precision: str, tokenizer, reference: Reference, path: Path, device: str = "cpu") -> dict:
    spec, _, extra = precision.partition("+")
    dtype, _, quantize = spec.partition("/")
    quantized_kv = extra == "kv8"
    servable = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(dtype=dtype, quantize=quantize or "auto")
    loaded = load_model(servable, str(path), device=device)
    agree = prefill_agree = total = 0
    divergences, prefill_divergences = [], []
    for text, ref in zip(TEXTS, reference.text_logits):
        ids, best = tokenizer.encode(text), ref.argmax(-1)
        stepwise = stepwise_logits(loaded.model, ids, quantized_kv, device)
        agree += int((stepwise.argmax(-1) == best).sum())
        divergences.append(kl_divergence(ref, stepwise))
        prefill = prefill_logits(loaded.model, ids, quantized_kv, device)
        prefill_agree += int((prefill.argmax(-1) == best).sum())
        prefill_divergences.append(kl_divergence(ref, prefill))
        total += ref.shape[0]
    bench_agree = sum(
        int((prefill_logits(loaded.model, ids, quantized_kv, device).argmax(-1) == best).sum())
        for ids, best in zip(reference.bench_prompts, reference.bench_top1)
    )
    bench_positions = sum(len(ids) for ids in reference.bench_prompts)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    options = EngineOptions(kv_cache_bytes=256 << 20, warmup=False, quantize_kv_cache=quantized_kv, device=device)
    greedy = asyncio.run(engine_greedy(servable, str(path), options, prompts))
    prefixes = [common_prefix(g, r) for g, r in zip(greedy, reference.greedy)]
    stepwise_kl, prefill_kl = torch.cat(divergences), torch.cat(prefill_divergences)
    return {
        "precision": precision,
        "device": device,
        "weights": loaded.precision.weights,
        "teacher_forced_top1": agree / total,
        "teacher_forced_kl_mean": float(stepwise_kl.mean()),
        "teacher_forced_kl_max": float(stepwise_kl.max()),
        "positions": total,
        "prefill_top1": prefill_agree / total,
        "prefill_kl_mean": float(prefill_kl.mean()),
        "prefill_kl_max": float(prefill_kl.max()),
        "bench_prefill_top1": bench_agree / max(bench_positions, 1),
        "bench_positions": bench_positions,
        "greedy_identical": sum(p == NEW_TOKENS for p in prefixes),
        "prompts": len(PROMPTS),
        "mean_common_prefix": sum(prefixes) / len(prefixes),
        "tokens_per_prompt": NEW_TOKENS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="float32/none,float32/fp16,float32/int8,float32/int8+kv8,bfloat16/none")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where tenor runs (HF: the CPU)")
    parser.add_argument("--json-out")
    parser.add_argument("--gguf", type=Path, default=None, help="a GGUF of SmolLM2-135M (default: the default model's)")
    parser.add_argument(
        "--bench-prompts", type=int, default=16, help="benchmark prompts for prefill top-1 at scale (0: none)"
    )
    parser.add_argument(
        "--as-cpu", choices=("avx2", "avx512"), help="run the code such a CPU runs, through benchmarks/cpu_proxy.py"
    )
    parser.add_argument("--as-avx2", dest="as_cpu", action="store_const", const="avx2", help="--as-cpu avx2")
    args = parser.parse_args()
    if args.as_cpu:
        narrow_to(args.as_cpu)
    from tenor.hardware import cpu_info

    path = args.gguf or default_gguf_path()
    tokenizer = load_tokenizer(path)
    reference = hf_reference(tokenizer, args.bench_prompts, path)
    cpu = cpu_info()
    precisions = [p for p in args.precisions.split(",") if p]
    rows = [measure(p, tokenizer, reference, path, args.device) for p in precisions]
    print(f"accuracy against HF transformers float32, tenor on {args.device}, CPU {cpu.model_name} ({cpu.isa})")
    print(
        "| precision | weights | teacher-forced top-1 | its KL mean, max (nats) | prefill top-1 | its KL mean, max | "
        "prefill top-1, benchmark prompts | greedy 32 identical | mean common prefix |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['precision']} | {r['weights']} | {r['teacher_forced_top1']:.1%} of {r['positions']} | "
            f"{r['teacher_forced_kl_mean']:.5f}, {r['teacher_forced_kl_max']:.4f} | "
            f"{r['prefill_top1']:.1%} | {r['prefill_kl_mean']:.5f}, {r['prefill_kl_max']:.4f} | "
            f"{r['bench_prefill_top1']:.1%} of {r['bench_positions']} | "
            f"{r['greedy_identical']} of {r['prompts']} | {r['mean_common_prefix']:.1f} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu.model_name, "isa": cpu.isa, "gguf": path.name, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()

"""Load time and single-stream decode speed of the default model: tenor vs HF transformers,
in the same run, for each tenor precision (DTYPE/QUANTIZE) against HF in the same activation dtype.
Prints a table and writes JSON.

    python benchmarks/decode.py [--tokens 64] [--repeats 3] [--precisions float32/int8,...] [--device cpu|cuda]
                                [--json-out out.json]

Each system loads the same GGUF. tenor runs through its engine (one request, greedy);
HF runs model.generate with a static cache off. Figures are medians over --repeats runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def bench_tenor(dtype: str, quantize: str, tokens: int, repeats: int, device: str = "cpu") -> dict:
    from tenor import registry
    from tenor.engine.api import GenerateRequest, SamplingParams
    from tenor.engine.factory import EngineOptions
    from tenor.engine.llm_engine import LLMEngine

    servable = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(dtype=dtype, quantize=quantize)

    async def main() -> dict:
        start = time.perf_counter()
        engine = LLMEngine(servable, None, EngineOptions(kv_cache_bytes=256 << 20, device=device))
        await engine.start()
        load_s = time.perf_counter() - start
        ids = tuple(engine.tokenizer.encode(PROMPT))
        rates = []
        for r in range(repeats):
            request = GenerateRequest(f"b{r}", ids, SamplingParams(max_tokens=tokens, ignore_eos=True))
            first: float | None = None
            last: float | None = None
            count = 0
            async for out in engine.generate(request):
                now = time.perf_counter()
                first = first or now
                last = now
                count += sum(len(d.token_ids) for d in out.deltas)
            assert first is not None and last is not None, "the engine produced no output"
            rates.append((count - 1) / (last - first))
        await engine.stop()
        return {"load_s": load_s, "decode_tok_s": statistics.median(rates), "runs": rates}

    return asyncio.run(main())


def bench_hf(dtype: str, tokens: int, repeats: int, device: str = "cpu") -> dict:
    import transformers

    from tenor.checkpoints.default_model import default_gguf_path

    path = default_gguf_path()
    start = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = (
        transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=getattr(torch, dtype))
        .eval()
        .to(device)
    )
    load_s = time.perf_counter() - start
    ids = torch.tensor([tok(PROMPT).input_ids], device=device)
    rates = []
    with torch.inference_mode():
        for _ in range(repeats):
            # Time the decode alone: a 1-token generate measures prefill, subtract it.
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
            t1 = time.perf_counter()
            model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
            t2 = time.perf_counter()
            rates.append((tokens - 1) / ((t2 - t1) - (t1 - t0)))
    return {"load_s": load_s, "decode_tok_s": statistics.median(rates), "runs": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--precisions",
        default="float32/int8,float32/fp16,float32/none,bfloat16/none",
        help="tenor's DTYPE/QUANTIZE pairs; HF runs once per activation dtype",
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where both systems run")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    from tenor.hardware import cpu_info

    results = {}
    for precision in args.precisions.split(","):
        dtype, _, quantize = precision.partition("/")
        results[f"tenor/{precision}"] = bench_tenor(dtype, quantize or "auto", args.tokens, args.repeats, args.device)
        if f"hf/{dtype}" not in results:
            results[f"hf/{dtype}"] = bench_hf(dtype, args.tokens, args.repeats, args.device)
    cpu = cpu_info()
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"single-stream decode on {where}, CPU {cpu.model_name} ({cpu.isa}), {torch.get_num_threads()} threads")
    print(f"{'system':<24}{'load s':>8}{'decode tok/s':>14}{'vs HF':>8}")
    for name, r in results.items():
        hf = results["hf/" + name.split("/")[1]]["decode_tok_s"]
        print(f"{name:<24}{r['load_s']:>8.2f}{r['decode_tok_s']:>14.1f}{r['decode_tok_s'] / hf:>7.2f}x")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "tokens": args.tokens,
                    "repeats": args.repeats,
                    "torch_threads": torch.get_num_threads(),
                    "cpu": cpu.model_name,
                    "isa": cpu.isa,
                    "device": where,
                    "results": results,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()

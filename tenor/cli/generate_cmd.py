"""`tenor generate`: offline generation in one process, with each sample's log-prob score."""

from __future__ import annotations

import argparse
import asyncio
import json

from tenor.cli.device_flag import add_device_flag, device_from
from tenor.engine.api import SamplingParams
from tenor.errors import UserError
from tenor.hardware import DTYPE_CHOICES, QUANTIZE_CHOICES


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text offline with a model, in one process")
    p.add_argument("prompt", help="the prompt (or comma-separated token ids for tokenized models)")
    p.add_argument("--model", default=None, help="registry name or checkpoint path (default: SmolLM2-135M-Instruct)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=None,
        help="activations dtype; auto (the default) picks bfloat16 only where the CPU computes it natively",
    )
    p.add_argument(
        "--quantize",
        choices=QUANTIZE_CHOICES,
        default=None,
        help="linear weights: auto (the default), none (in --dtype, exact), fp16 (FBGEMM), int8 (decode) + fp16, "
        "int8a8 (int8 activations for big batches on x86 CPUs without AMX)",
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--num-samples", "-n", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print one JSON object per sample")
    p.add_argument(
        "--tensor-parallel",
        "-tp",
        type=int,
        default=1,
        metavar="N",
        help="shard the model over N local processes (the cores are split between them)",
    )
    add_device_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tenor.registry import resolve_model

    servable, checkpoint = resolve_model(args.model, args.dtype)
    if args.quantize is not None:
        servable = servable.with_overrides(quantize=args.quantize)
    if args.tensor_parallel < 1:
        raise UserError(f"--tensor-parallel must be >= 1, got {args.tensor_parallel}")
    device = device_from(args.device)
    sampling = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        n=args.num_samples,
    )
    samples = asyncio.run(
        _generate(servable, checkpoint, args.prompt, args.chat, sampling, args.tensor_parallel, device)
    )
    samples.sort(key=lambda s: -s["score"])
    for i, sample in enumerate(samples):
        if args.json:
            print(json.dumps(sample, ensure_ascii=False))
        else:
            print(f"--- sample {i}  score {sample['score']:.4f}")
            print(sample["text"])
    return 0


async def _generate(
    servable,
    checkpoint,
    prompt: str,
    chat: bool,
    sampling: SamplingParams,
    tensor_parallel: int = 1,
    device: str = "cpu",
) -> list[dict]:
    from tenor.dist.local import local_group
    from tenor.engine.factory import EngineOptions, create_engine
    from tenor.server.pipeline import ChatPrompt, RequestPipeline, TextPrompt

    with local_group(servable, tensor_parallel, device) as local:
        options = EngineOptions(warmup=False, max_waiting=1, group=local.leader, device=device)
        engine = create_engine(servable, checkpoint, options)
        await engine.start()
        try:
            pipeline = RequestPipeline(engine, servable.tokenized, servable.accepts_text)
            if chat:
                ids = pipeline.prompt_ids(ChatPrompt(({"role": "user", "content": prompt},), field="PROMPT"))
            else:
                pipeline = pipeline.for_prompt(TextPrompt(prompt, field="PROMPT"))
                ids = pipeline.prompt_ids(TextPrompt(prompt, field="PROMPT"))
            samples = await pipeline.collect(pipeline.request("gen", ids, sampling))
        finally:
            await engine.stop()
    return [{"text": s.text, "token_ids": s.token_ids, "score": s.cumulative_logprob} for s in samples]

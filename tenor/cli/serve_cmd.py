"""`tenor serve`: one model behind the HTTP API (JetStream /generate, OpenAI /v1/*,
/healthcheck, /metrics), with nothing to configure.

    tenor serve [--model NAME|PATH] [--host 127.0.0.1] [--port 8000]
                [--dtype auto|bfloat16|float32] [--quantize auto|none|fp16|int8|int8a8] [--api-key KEY]
                [--max-waiting N] [--kv-cache-gb G] [--quantize-kv-cache] [--max-num-batched-tokens N]
                [--drain-timeout S] [--device auto|cpu|cuda]

--model is a registry name (`llama.SmolLM2_135M_Instruct`, `test.TinyLlamaRandom`, ...) or
a checkpoint: a directory or a .gguf file, served with SmolLM2's servable config (the
engine reads the model's shape from the checkpoint itself).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from tenor import registry
from tenor.cli.connection_flags import add_connection_flags, connection_limits_from
from tenor.cli.device_flag import add_device_flag, device_from
from tenor.engine.factory import EngineOptions, create_engine
from tenor.errors import UserError
from tenor.hardware import QUANTIZE_CHOICES
from tenor.registry import ServableConfig

DEFAULT_MODEL = "llama.SmolLM2_135M_Instruct"
API_KEY_ENV = "TENOR_API_KEY"  # keeps the key out of `ps` listings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve one model over HTTP (JetStream and OpenAI APIs)",
        description="Serve one model over HTTP: POST /generate, /v1/completions, /v1/chat/completions, "
        "GET /v1/models, /healthcheck, /metrics. Prints the URL once ready; SIGTERM drains.",
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"registry name, checkpoint directory or .gguf file (default: {DEFAULT_MODEL})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default: 8000)")
    parser.add_argument(
        "--dtype",
        choices=registry.DTYPES,
        default=None,
        help="activations dtype (default: the model config's, auto for the default model: "
        "bfloat16 where the CPU computes it natively, else float32)",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZE_CHOICES,
        default=None,
        help="how linear weights are stored: auto (default: int8 weights beside float32 activations on "
        "x86, as int8a8 on CPUs without AMX, else as int8), none (in --dtype; exact), fp16 "
        "(FBGEMM's fp16 GEMM), int8 (int8 for decode, prefill as exact as fp16), int8a8 (int8 activations "
        "against 4-bit weights for big batches on x86 CPUs without AMX: llama.cpp's numerics, faster, "
        "less exact)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require 'Authorization: Bearer KEY' on /v1/* and /generate (default: ${API_KEY_ENV})",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=EngineOptions.max_waiting,
        help=f"requests allowed to wait for a slot; more get 429 (default: {EngineOptions.max_waiting})",
    )
    parser.add_argument(
        "--kv-cache-gb",
        type=float,
        default=None,
        help="KV-cache budget in GiB (default: sized from the model's batch and context)",
    )
    parser.add_argument("--quantize-kv-cache", action="store_true", help="keep the KV cache in int8")
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=EngineOptions.max_num_batched_tokens,
        metavar="N",
        help="tokens a step computes, decodes plus prompt chunks: lower cuts the time decodes wait behind "
        f"prompts, higher suits long prompts on fast hardware (default: {EngineOptions.max_num_batched_tokens}; "
        "at least the model's batch size)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=10.0,
        help="seconds in-flight requests may take to finish after SIGTERM (default: 10)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="also serve JetStream's gRPC Orchestrator (Decode, HealthCheck) on this port; 0 picks one",
    )
    add_connection_flags(parser)
    add_device_flag(parser)
    parser.add_argument(
        "--tensor-parallel",
        "-tp",
        type=int,
        default=1,
        metavar="N",
        help="shard the model over N local processes, the cores split between them (default: 1)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tenor.server.serve import run_server  # not at import: every tenor command builds this parser

    limits = connection_limits_from(args)
    servable, checkpoint = resolve_model(args.model)
    if args.dtype is not None:
        servable = servable.with_overrides(dtype=args.dtype)
    if args.quantize is not None:
        servable = servable.with_overrides(quantize=args.quantize)
    options = engine_options(args.max_waiting, args.kv_cache_gb, args.quantize_kv_cache, args.max_num_batched_tokens)
    if args.tensor_parallel < 1:
        raise UserError(f"--tensor-parallel must be >= 1, got {args.tensor_parallel}")
    device = device_from(args.device)
    options = dataclasses.replace(options, device=device)
    from tenor.dist.local import local_group

    with local_group(servable, args.tensor_parallel, device) as local:
        options = dataclasses.replace(options, group=local.leader)
        return run_server(
            lambda: create_engine(servable, checkpoint, options),
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            drain_timeout_s=args.drain_timeout,
            grpc_port=args.grpc_port,
            tokenized=servable.tokenized,
            limits=limits,
            accepts_text=servable.accepts_text,
        )


def resolve_model(model: str) -> tuple[ServableConfig, str | None]:
    """A registry name -> (its config, None); a checkpoint path -> (SmolLM2's config, the path)."""
    path = Path(model).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return registry.get(DEFAULT_MODEL), str(path)
    if path.exists():
        raise UserError(f"--model {model}: expected a checkpoint directory or a .gguf file")
    if _looks_like_path(model):
        raise UserError(f"--model {model}: no such file or directory")
    return registry.get(model), None


def _looks_like_path(model: str) -> bool:
    # Registry names contain dots too (llama.X), so only separators and suffixes tell.
    return "/" in model or os.sep in model or model.startswith("~") or model.endswith(".gguf")


def engine_options(
    max_waiting: int,
    kv_cache_gb: float | None,
    quantize_kv_cache: bool,
    max_num_batched_tokens: int = EngineOptions.max_num_batched_tokens,
) -> EngineOptions:
    if max_waiting < 0:
        raise UserError(f"--max-waiting must be >= 0, got {max_waiting}")
    if kv_cache_gb is not None and not kv_cache_gb > 0:
        raise UserError(f"--kv-cache-gb must be > 0, got {kv_cache_gb}")
    kv_cache_bytes = None if kv_cache_gb is None else int(kv_cache_gb * 2**30)
    if max_num_batched_tokens < 1:
        raise UserError(f"--max-num-batched-tokens must be >= 1, got {max_num_batched_tokens}")
    return EngineOptions(
        kv_cache_bytes=kv_cache_bytes,
        max_waiting=max_waiting,
        quantize_kv_cache=quantize_kv_cache,
        max_num_batched_tokens=max_num_batched_tokens,
    )

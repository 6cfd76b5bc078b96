"""Resident bytes of a Llama-3.2-1B-shaped model whose embedding table is kept as its checkpoint
holds it, against the same model with that table widened to float32 before the build (what it
took before): each side in a fresh process, so that one's freed pages do not hide the other's.

    python benchmarks/embedding_memory.py [--embedding bf16|q6_k] [--layers 2] [--weight-format int8] [--untied]

--embedding bf16: every weight in bf16, as an HF safetensors checkpoint (decoder.lookup_table
keeps the table in bf16); q6_k: float32 layers and a random Q6_K table, as a Q4_K_M GGUF gives a
tied embedding (block_weights.PackedRows keeps its rows' bytes).

The model has Llama 3.2 1B's vocabulary and widths (128256 x 2048, tied LM head) and --layers of
its 16 blocks: the layers are the same on both sides, so few keep the run short. Prints the
resident bytes the built model holds (after the checkpoint's own tensors are dropped) and its
embedding table's, for each side, and checks that both give the same logits on a short prompt.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import resource
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

from tenor.models.block_weights import PackedRows  # noqa: E402
from tenor.models.config import ModelConfig  # noqa: E402
from tenor.models.model import build_model, random_weights  # noqa: E402

PROMPT = [128000, 791, 6864, 315, 9822, 374, 12366, 13]


def llama_1b(layers: int, tied: bool) -> ModelConfig:
    return ModelConfig(
        arch="llama",
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=layers,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=500000.0,
        tie_word_embeddings=tied,
        bos_token_id=128000,
        eos_token_ids=(128001,),
    )


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def q6_k_table(rows: int, width: int) -> PackedRows:
    """Random Q6_K super-blocks (210 bytes a 256 values), a finite float16 step last."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(rows, width // 256, 210), dtype=np.uint8)
    raw[..., 208:] = (rng.standard_normal((rows, width // 256, 1)) * 1e-3).astype(np.float16).view(np.uint8)
    return PackedRows(
        torch.from_numpy(raw.reshape(rows, -1)), width, lambda b: dequantize(b, GGMLQuantizationType.Q6_K)
    )


def measure(embedding: str, side: str, layers: int, weight_format: str, tied: bool) -> dict:
    from tests.models.single_sequence import prefill_logits

    config = llama_1b(layers, tied)
    torch.set_grad_enabled(False)
    before = rss_bytes()
    weights: dict = random_weights(config, 0)
    if embedding == "bf16":
        weights = {n: w.to(torch.bfloat16) for n, w in weights.items()}
    else:
        weights["embed.weight"] = q6_k_table(config.vocab_size, config.hidden_size)
    if side == "float32":
        weights = {n: w.float() if isinstance(w, torch.Tensor) else w.dequantize() for n, w in weights.items()}
    checkpoint = sum(w.numel() * w.element_size() for w in weights.values() if isinstance(w, torch.Tensor))
    model = build_model(config, weights, torch.float32, weight_format)
    del weights
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)  # what the allocator kept of freed temporaries goes back first
    held = rss_bytes() - before
    logits = prefill_logits(model, PROMPT)[-1]
    return {
        "side": side,
        "model_rss_bytes": held,
        "embed_table_bytes": _table_bytes(model),
        "embed_dtype": str(model.embed.dtype) if model.embed_blocks is None else type(model.embed_blocks).__name__,
        "checkpoint_bytes": checkpoint,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "logits": logits[:64].tolist(),
        "argmax": int(logits.argmax()),
    }


def _table_bytes(model) -> int:
    if isinstance(model.embed_blocks, PackedRows):
        return model.embed_blocks.raw.numel()
    return model.embed.numel() * model.embed.element_size()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedding", default="bf16", choices=("bf16", "q6_k"))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--weight-format", default="int8", choices=("dense", "fp16", "int8", "int8a8"))
    parser.add_argument("--untied", action="store_true")
    parser.add_argument("--side", choices=("packed", "float32"), help=argparse.SUPPRESS)  # one child's side
    parser.add_argument("--json-out")
    args = parser.parse_args()
    if args.side:
        print(json.dumps(measure(args.embedding, args.side, args.layers, args.weight_format, not args.untied)))
        return
    results = []
    for side in ("packed", "float32"):
        flags = ["--embedding", args.embedding, "--layers", str(args.layers), "--weight-format", args.weight_format]
        flags += ["--side", side]
        flags += ["--untied"] if args.untied else []
        out = subprocess.run([sys.executable, __file__, *flags], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    narrow, wide = results
    same = narrow["logits"] == wide["logits"] and narrow["argmax"] == wide["argmax"]
    for r in results:
        model, table, peak = (r[k] / 2**20 for k in ("model_rss_bytes", "embed_table_bytes", "peak_rss_bytes"))
        print(
            f"table {r['side']:>7}: model {model:7.0f} MiB resident, embedding table {table:5.0f} MiB "
            f"({r['embed_dtype']}), peak {peak:6.0f} MiB"
        )
    saved = wide["model_rss_bytes"] - narrow["model_rss_bytes"]
    print(f"the packed table holds {saved / 2**20:.0f} MiB less; logits identical: {same}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"results": results, "identical_logits": same}, indent=1))


if __name__ == "__main__":
    main()

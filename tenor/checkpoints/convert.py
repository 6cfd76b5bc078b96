"""Convert any checkpoint tenor reads (tenor, HF directory, GGUF) into a committed tenor
checkpoint, optionally casting float tensors and quantizing linear weights to int8."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

from tenor.checkpoints.format import save_checkpoint
from tenor.checkpoints.layout import QUANTIZATIONS, SCALE_SUFFIX, linear_weight_names
from tenor.checkpoints.loader import load_any
from tenor.checkpoints.quantize import dequantize_weights, quantize_tensor
from tenor.errors import CheckpointError, UserError

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def convert(
    src: str | Path,
    dst: str | Path,
    dtype: str | None = None,
    quantize: str | None = None,
    progress: bool = True,
) -> Path:
    """Write `src` as a tenor checkpoint at `dst` (which must not exist); returns `dst`.

    dtype: "bfloat16" or "float32" for the float tensors; None keeps the source's
    (GGUF imports are float32). quantize: None or "int8" (linear weights only).
    """
    dst = Path(dst)
    if dtype is not None and dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise UserError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")
    if dst.exists():  # checked before loading: a large source takes a while to read
        raise CheckpointError(f"{dst}: already exists; choose a new destination")
    loaded = load_any(src)
    weights = loaded.weights
    if loaded.quantization is not None:
        weights = dequantize_weights(weights)
    linear = set(linear_weight_names(loaded.config)) if quantize else set()
    target = DTYPES[dtype] if dtype else None
    out: dict[str, torch.Tensor] = {}
    for name in tqdm(list(weights), desc=f"convert {Path(src).name}", unit="tensor", disable=not progress):
        tensor = weights[name]
        if name in linear:  # quantized from the source's precision, not from a bf16 copy
            out[name], out[name + SCALE_SUFFIX] = quantize_tensor(tensor)
        elif target is not None and tensor.dtype != target:
            out[name] = tensor.to(target)
        else:
            out[name] = tensor
    if loaded.tokenizer_path is None:
        return save_checkpoint(dst, loaded.config, out, quantization=quantize)
    from tenor.tokenizer import load_tokenizer  # lazily: its stack loads slowly and weights-only sources skip it

    with tempfile.TemporaryDirectory(prefix="tenor-tokenizer-") as tokenizer_dir:
        load_tokenizer(loaded.tokenizer_path).save(tokenizer_dir)
        return save_checkpoint(dst, loaded.config, out, quantization=quantize, tokenizer_dir=tokenizer_dir)

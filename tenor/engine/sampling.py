"""Choosing next tokens from logits, for a whole batch at once.

Greedy rows take the argmax. Sampled rows apply temperature, then top-k, then top-p, and
draw with the "exponential race" (argmax of p / E, E ~ Exp(1)), which needs one random
vector per row: each sequence owns a torch.Generator, so a seed gives the same tokens
whatever else shares the batch. Reported logprobs are under the model's own distribution
(log_softmax of the raw logits), the score SAX and HF report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from tenor.engine.api import SamplingParams
from tenor.models import native


@dataclass(frozen=True)
class SampledToken:
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the top-k alternatives when logprobs were asked for


def make_generator(params: SamplingParams, sample_index: int) -> torch.Generator | None:
    if params.greedy:
        return None
    gen = torch.Generator()
    if params.seed is not None:
        # Any int64 seed is welcome; the generator takes 64 unsigned bits, so fold into them.
        gen.manual_seed((params.seed * 1_000_003 + sample_index) % 2**64)
    else:
        gen.seed()
    return gen


def sample(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> list[SampledToken]:
    """logits: [B, V] float32, one row per sequence."""
    chosen, log_norm = _greedy_and_log_norm(logits)
    sampled_rows = [i for i, p in enumerate(params) if not p.greedy]
    if sampled_rows:
        rows = torch.tensor(sampled_rows)
        picks = _sample_rows(
            logits.index_select(0, rows), [params[i] for i in sampled_rows], [generators[i] for i in sampled_rows]
        )
        chosen = chosen.index_copy(0, rows, picks)
    chosen_logprobs = (logits.gather(1, chosen[:, None])[:, 0] - log_norm).tolist()
    chosen_ids = chosen.tolist()
    out = []
    for i, p in enumerate(params):
        top: tuple[tuple[int, float], ...] = ()
        if p.logprobs:
            values, ids = (logits[i] - log_norm[i]).topk(p.logprobs)
            top = tuple(zip(ids.tolist(), values.tolist()))
        out.append(SampledToken(chosen_ids[i], chosen_logprobs[i], top))
    return out


def _greedy_and_log_norm(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's greedy pick and log-sum-exp (logprob = logit - log-sum-exp), in one native pass
    where it can; torch's ops elsewhere and for rows holding nan or inf."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and native.available():
        chosen, log_norm = native.argmax_logsumexp(logits.contiguous())
        if bool(torch.isfinite(log_norm).all()):
            return chosen, log_norm
    return logits.argmax(dim=-1), torch.logsumexp(logits, dim=-1)


def _sample_rows(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> torch.Tensor:
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    scaled = logits / temps[:, None]
    top_ks = [p.top_k for p in params]
    if any(k > 0 for k in top_ks):
        vocab = scaled.shape[-1]
        ks = torch.tensor([k if 0 < k < vocab else vocab for k in top_ks])
        sorted_desc = scaled.sort(dim=-1, descending=True).values
        kth = sorted_desc.gather(1, (ks - 1)[:, None])
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    top_ps = torch.tensor([p.top_p for p in params], dtype=probs.dtype)
    if (top_ps < 1).any():
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly above each token
        sorted_probs = sorted_probs.masked_fill(before > top_ps[:, None], 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
    noise = torch.empty_like(probs)
    for i, gen in enumerate(generators):
        noise[i].exponential_(generator=gen)
    return (probs / noise).argmax(dim=-1)

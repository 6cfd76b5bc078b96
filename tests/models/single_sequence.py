"""Runs one sequence through a tenor model, whole or token by token through the KV cache."""

import torch

from tenor.models.layers import AttentionBatch, PagedKVCache, PrefillSpan


def new_cache(model, max_tokens: int = 256, block_size: int = 16) -> PagedKVCache:
    c = model.config
    dtype = model.compute_dtype
    return PagedKVCache(c.num_layers, -(-max_tokens // block_size), block_size, c.num_kv_heads, c.head_dim, dtype)


@torch.inference_mode()
def prefill_logits(model, ids: list[int], cache: PagedKVCache | None = None) -> torch.Tensor:
    """Logits [len(ids), V] from one prefill of the whole prompt."""
    cache = cache or new_cache(model)
    n = len(ids)
    batch = AttentionBatch(torch.arange(n), 0, None, None, [PrefillSpan(0, n, 0, None)])
    return model(torch.tensor(ids), torch.arange(n), cache, batch, torch.arange(n))


@torch.inference_mode()
def stepwise_logits(model, ids: list[int], first: int) -> torch.Tensor:
    """Prefills ids[:first], then feeds the rest one token at a time through the cache."""
    cache = new_cache(model)
    rows = [prefill_logits(model, ids[:first], cache)]
    for t in range(first, len(ids)):
        blocks = torch.arange(-(-(t + 1) // cache.block_size))[None]
        batch = AttentionBatch(torch.tensor([t]), 1, blocks, None, [], decode_span=t + 1)
        rows.append(model(torch.tensor([ids[t]]), torch.tensor([t]), cache, batch, torch.arange(1)))
    return torch.cat(rows)

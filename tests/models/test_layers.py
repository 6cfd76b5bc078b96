"""Building blocks: the paged KV cache round trip, float and int8, in both dtypes."""

import pytest
import torch

from tenor.models.layers import PagedKVCache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("quantized", [False, True])
def test_kv_cache_round_trip(dtype, quantized):
    cache = PagedKVCache(2, 4, 16, 3, 64, dtype, quantized=quantized)
    gen = torch.Generator().manual_seed(0)
    k = (torch.randn(5, 3, 64, generator=gen) * 4).to(dtype)
    v = (torch.randn(5, 3, 64, generator=gen) * 4).to(dtype)
    slots = torch.tensor([0, 1, 2, 17, 40])
    cache.write(1, slots, k, v)
    got_k, got_v = cache.read(1, slots)  # [K, L, E]
    # int8 with one scale per token and head: error below 1% of that head's largest value.
    tolerance = (k.float().abs().amax() / 100) if quantized else 0
    assert (got_k.transpose(0, 1).float() - k.float()).abs().max() <= tolerance
    assert (got_v.transpose(0, 1).float() - v.float()).abs().max() <= tolerance
    assert cache.read(0, slots)[0].abs().max() == 0  # other layers untouched
    # Whole blocks, head-major: rows are (kv head, sequence); slot 17 is block 1, offset 1.
    block_k, _ = cache.read_blocks(1, torch.tensor([[0], [1]]))  # [K * 2, 16, E]
    assert block_k.shape == (3 * 2, 16, 64)
    assert (block_k[1, 1].float() - k[3, 0].float()).abs().max() <= tolerance
    assert (block_k[2 * 2 + 1, 1].float() - k[3, 2].float()).abs().max() <= tolerance

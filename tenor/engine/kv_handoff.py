"""Moving a prompt's KV blocks out of one engine's paged cache and into another's.

Export copies a prefilled prompt's full blocks (skipping those the receiver already holds).
Import goes through the block manager: it pins the leading blocks the prefix cache already
holds, allocates blocks for the rest, copies the received k/v (and int8 scales) into them and
registers them in the prefix cache, so the scheduler's ordinary prefix match admits the
request with them and only the prompt's tail (under one block) runs locally. Runs on the
engine's step thread, between steps.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence as Seq

from tenor.disagg.kv_blocks import KVBlocks
from tenor.engine.block_manager import ROOT_KEY, BlockManager, block_key
from tenor.engine.sequence import Sequence
from tenor.models.layers import PagedKVCache

log = logging.getLogger(__name__)


def held_prefix_blocks(blocks: BlockManager, prompt_token_ids: Seq[int]) -> int:
    """How many leading full blocks of the prompt this engine's prefix cache holds (a hint:
    they may be evicted before the import, which then falls back to computing them)."""
    cached, _ = blocks.match_prefix(list(prompt_token_ids))
    return len(cached)


def export_prompt_blocks(cache: PagedKVCache, seq: Sequence, skip_blocks: int) -> KVBlocks:
    """The prompt's full blocks from `skip_blocks` on; call before the sequence frees them."""
    num_full = seq.num_prompt_tokens // cache.block_size
    first = min(max(skip_blocks, 0), num_full)
    kv, scales = cache.export_blocks(seq.block_table[first:num_full])
    return KVBlocks(cache.block_size, first, kv, scales)


def import_prompt_blocks(
    blocks: BlockManager, cache: PagedKVCache, prompt_token_ids: Seq[int], incoming: KVBlocks
) -> list[int]:
    """Places `incoming` in the cache as prefix-cached blocks of the prompt; returns the blocks
    pinned for the request (release them when it retires). Blocks already cached are reused,
    not overwritten. Raises ValueError for blocks that do not belong to this prompt or cache."""
    size = blocks.block_size
    if incoming.block_size != size:
        raise ValueError(f"received blocks of {incoming.block_size} tokens; this cache's hold {size}")
    end = incoming.first_block + incoming.num_blocks
    if incoming.first_block < 0 or end > len(prompt_token_ids) // size:
        raise ValueError(f"received blocks [{incoming.first_block}, {end}) past the prompt's full blocks")
    if not blocks.enable_prefix_caching:
        return []
    pinned: list[int] = []
    fresh: list[tuple[int, int, bytes]] = []  # (index in incoming, block, key)
    try:
        parent = ROOT_KEY
        for i in range(end):
            key = block_key(parent, prompt_token_ids[i * size : (i + 1) * size])
            parent = key
            held = blocks.lookup(key)
            if held is not None:
                blocks.acquire([held])
                pinned.append(held)
                continue
            if i < incoming.first_block:
                break  # a block we said we held is gone: what follows it cannot be matched
            if blocks.num_free == 0:
                break  # no room: the request computes the rest itself
            block = blocks.allocate(1)[0]
            pinned.append(block)
            fresh.append((i - incoming.first_block, block, key))
        if fresh:
            picks = [j for j, _, _ in fresh]
            scales = None if incoming.scales is None else incoming.scales[:, :, :, picks]
            cache.import_blocks([b for _, b, _ in fresh], incoming.kv[:, :, :, picks], scales)
    except BaseException:
        blocks.release(pinned)
        raise
    for _, block, key in fresh:
        blocks.register(block, key)
    return pinned

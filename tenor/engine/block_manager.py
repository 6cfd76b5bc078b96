"""KV block bookkeeping and the prefix cache. Pure Python: no torch, no I/O.

A full block of a sequence is keyed by a chain hash: key_i = blake2b(key_{i-1} || tokens_i).
The key covers every token before and in the block, so two blocks share a key only when
their whole prefixes are equal (a 128-bit cryptographic hash: accidental collisions are not a
practical concern). Freed blocks keep their key and content until the allocator hands them
out again, oldest-freed first, so recently used prefixes survive longest.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence as Seq

ROOT_KEY = b"tenor-prefix-root"


def block_key(parent: bytes, tokens: Seq[int]) -> bytes:
    digest = hashlib.blake2b(parent, digest_size=16)
    digest.update(b",".join(str(t).encode() for t in tokens))
    return digest.digest()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of at least one token, got {num_blocks} x {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref_count = [0] * num_blocks
        self._key: list[bytes | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._cached: dict[bytes, int] = {}
        self.prefix_queries = 0  # prompt tokens looked up
        self.prefix_hits = 0  # prompt tokens found

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def is_free(self, block: int) -> bool:
        return self._ref_count[block] == 0

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, token_ids: Seq[int]) -> tuple[list[int], list[bytes]]:
        """Cached blocks for the longest run of full blocks of `token_ids`, with their keys.

        Takes no references; call `acquire` on the result to use it.
        """
        blocks: list[int] = []
        keys: list[bytes] = []
        if not self.enable_prefix_caching:
            return blocks, keys
        parent = ROOT_KEY
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            key = block_key(parent, token_ids[start : start + self.block_size])
            block = self._cached.get(key)
            if block is None:
                break
            blocks.append(block)
            keys.append(key)
            parent = key
        return blocks, keys

    def lookup(self, key: bytes) -> int | None:
        """The block holding the prefix `key`, if cached (takes no reference)."""
        return self._cached.get(key) if self.enable_prefix_caching else None

    def record_lookup(self, queried: int, hit: int) -> None:
        self.prefix_queries += queried
        self.prefix_hits += hit

    def acquire(self, blocks: Seq[int]) -> None:
        for block in blocks:
            if self._ref_count[block] == 0:
                del self._free[block]
            self._ref_count[block] += 1

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise MemoryError(f"asked for {count} KV blocks, {len(self._free)} free")
        out = []
        for _ in range(count):
            block, _ = self._free.popitem(last=False)
            key = self._key[block]
            if key is not None:  # its old content is about to be overwritten
                if self._cached.get(key) == block:
                    del self._cached[key]
                self._key[block] = None
            self._ref_count[block] = 1
            out.append(block)
        return out

    def release(self, blocks: Seq[int]) -> None:
        # Freed in reverse so that a sequence's tail blocks are reused before its head,
        # keeping shared prefixes cached longer.
        for block in reversed(blocks):
            self._ref_count[block] -= 1
            if self._ref_count[block] == 0:
                self._free[block] = None

    def register(self, block: int, key: bytes) -> None:
        """Marks a full block as holding the prefix `key`, so later prompts can reuse it."""
        if not self.enable_prefix_caching or key in self._cached:
            return
        self._cached[key] = block
        self._key[block] = key

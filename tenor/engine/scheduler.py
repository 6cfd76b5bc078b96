"""Decides each step's work: a pure planner over sequences and KV blocks (no torch, no I/O).

Every step runs one token for each decoding sequence, then spends what is left of the token
budget on prompt chunks (chunked prefill), so a long prompt never stalls everyone's decode.
When KV blocks run out, the most recently admitted sequence is preempted: its blocks are
freed and it goes back to the front of the queue to be recomputed later. Admission reuses
cached prefix blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tenor.engine.block_manager import ROOT_KEY, BlockManager, block_key
from tenor.engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int  # decode slots
    max_num_batched_tokens: int = 512  # tokens per step, decode and prefill together
    watermark_blocks: int = 1  # free blocks kept back when admitting, so decodes can grow

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}) so that every slot can decode each step"
            )


@dataclass(frozen=True)
class Chunk:
    """Run tokens [start, start + length) of `seq` this step."""

    seq: Sequence
    start: int
    length: int

    @property
    def is_decode(self) -> bool:
        return self.length == 1 and self.start > 0


@dataclass
class StepPlan:
    chunks: list[Chunk] = field(default_factory=list)  # decodes first, then prompt chunks
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.length for c in self.chunks)


class Scheduler:
    def __init__(self, config: SchedulerConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.config.max_num_batched_tokens
        for seq in list(self.running):
            if seq.status is not SeqStatus.RUNNING or seq.in_prefill:
                continue
            if self._make_room(seq, seq.num_computed + 1, plan):
                plan.chunks.append(Chunk(seq, seq.num_computed, 1))
                budget -= 1
        for seq in self.running:
            if budget <= 0:
                break
            if seq.in_prefill:
                budget -= self._plan_prefill(seq, budget, plan)
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            used = self._admit(self.waiting[0], budget, plan)
            if not used:
                break
            budget -= used
        return plan

    def _make_room(self, seq: Sequence, num_tokens: int, plan: StepPlan) -> bool:
        """Ensures `seq` has blocks for `num_tokens`, preempting newer sequences if needed."""
        need = self.blocks.blocks_needed(num_tokens) - len(seq.block_table)
        while need > self.blocks.num_free:
            victim = self.running[-1]
            self._preempt(victim, plan)
            if victim is seq:
                return False
        if need > 0:
            seq.block_table.extend(self.blocks.allocate(need))
        return True

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        plan.chunks = [c for c in plan.chunks if c.seq is not seq]
        plan.preempted.append(seq)
        self.running.remove(seq)
        self._free(seq)
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _plan_prefill(self, seq: Sequence, budget: int, plan: StepPlan) -> int:
        """Plans the next prompt chunk of a running sequence; returns tokens planned."""
        length = min(seq.num_pending, budget)
        room = (len(seq.block_table) + self.blocks.num_free) * self.blocks.block_size - seq.num_computed
        length = min(length, room)
        if length <= 0:
            return 0
        extra = self.blocks.blocks_needed(seq.num_computed + length) - len(seq.block_table)
        if extra > 0:
            seq.block_table.extend(self.blocks.allocate(extra))
        plan.chunks.append(Chunk(seq, seq.num_computed, length))
        return length

    def _admit(self, seq: Sequence, budget: int, plan: StepPlan) -> int:
        """Moves the head of the queue into running with its first chunk; 0 if it cannot fit."""
        cached: list[int] = []
        keys: list[bytes] = []
        if not seq.block_table:
            # Never take the whole prompt from the cache: its last token must run for logits.
            cached, keys = self.blocks.match_prefix(seq.token_ids[: len(seq.token_ids) - 1])
        num_cached = len(cached) * self.blocks.block_size
        pending = len(seq.token_ids) - num_cached
        length = min(pending, budget)
        need = self.blocks.blocks_needed(num_cached + length) - len(cached)
        reusable = sum(1 for b in cached if self.blocks.is_free(b))
        available = self.blocks.num_free - reusable - self.config.watermark_blocks
        if need > available:
            length = (len(cached) + available) * self.blocks.block_size - num_cached
            if length <= 0 or (length < pending and self.running):
                return 0  # wait for running sequences to free memory rather than crawl
            need = self.blocks.blocks_needed(num_cached + length) - len(cached)
        self.blocks.acquire(cached)
        if seq.num_computed == 0 and seq.num_output_tokens == 0:
            self.blocks.record_lookup(len(seq.token_ids), num_cached)
            seq.num_cached_prompt_tokens = num_cached
        seq.block_table = cached + self.blocks.allocate(need)
        seq.block_keys = keys
        seq.num_computed = num_cached
        seq.status = SeqStatus.RUNNING
        self.waiting.popleft()
        self.running.append(seq)
        plan.chunks.append(Chunk(seq, num_cached, length))
        return length

    def commit(self, plan: StepPlan) -> None:
        """Records that the plan ran: advances each sequence and caches its full blocks."""
        for chunk in plan.chunks:
            seq = chunk.seq
            seq.num_computed = chunk.start + chunk.length
            self._register_full_blocks(seq)

    def _register_full_blocks(self, seq: Sequence) -> None:
        size = self.blocks.block_size
        while len(seq.block_keys) < seq.num_computed // size:
            i = len(seq.block_keys)
            parent = seq.block_keys[-1] if seq.block_keys else ROOT_KEY
            key = block_key(parent, seq.token_ids[i * size : (i + 1) * size])
            seq.block_keys.append(key)
            self.blocks.register(seq.block_table[i], key)

    def finish(self, seq: Sequence) -> None:
        """Removes a finished or aborted sequence wherever it is and frees its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._free(seq)
        seq.status = SeqStatus.FINISHED

    def _free(self, seq: Sequence) -> None:
        self.blocks.release(seq.block_table)
        seq.block_table = []
        seq.block_keys = []
        seq.num_computed = 0

"""A sequence: one sample of one request as the scheduler sees it. Pure Python.

A sequence needs the tokens [num_computed, len(token_ids)) run through the model. A prompt
is a long run (prefill, possibly in chunks); afterwards each step runs just the newest token
(decode). After a preemption num_computed drops to 0 and prompt plus output are recomputed.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from tenor.engine.api import SamplingParams

_ids = itertools.count()


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: str
    sample_index: int
    token_ids: list[int]
    num_prompt_tokens: int
    sampling: SamplingParams
    arrival: float = 0.0
    # Score requests: logprobs of token_ids[score_from:] given what precedes them; no generation.
    score_from: int | None = None
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SeqStatus = SeqStatus.WAITING
    num_computed: int = 0  # tokens whose k/v are in the cache
    block_table: list[int] = field(default_factory=list)
    block_keys: list[bytes] = field(default_factory=list)  # prefix-cache keys of full blocks
    num_cached_prompt_tokens: int = 0  # prompt tokens found in the prefix cache at admission
    cumulative_logprob: float = 0.0
    score_logprobs: list[float] = field(default_factory=list)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_pending(self) -> int:
        return len(self.token_ids) - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_pending > 1 or self.num_computed == 0

    def wants_logits_rows(self, start: int, length: int) -> range:
        """Positions in [start, start+length) whose logits this sequence needs."""
        end = start + length
        if self.score_from is not None:
            lo = max(start, self.score_from - 1)
            return range(lo, min(end, len(self.token_ids) - 1))
        return range(end - 1, end) if end == len(self.token_ids) else range(0)

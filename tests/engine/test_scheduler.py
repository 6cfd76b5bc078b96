"""The scheduler and block manager are pure planners: tested with plain tables, no torch."""

import pytest

from tenor.engine.api import SamplingParams
from tenor.engine.block_manager import BlockManager
from tenor.engine.scheduler import Scheduler, SchedulerConfig, StepPlan
from tenor.engine.sequence import SeqStatus, Sequence


def seq(name: str, prompt_len: int, first_token: int = 10, max_tokens: int = 8) -> Sequence:
    return Sequence(
        name, 0, list(range(first_token, first_token + prompt_len)), prompt_len, SamplingParams(max_tokens=max_tokens)
    )


def make(num_blocks=16, block_size=4, max_seqs=4, budget=16, watermark=0) -> Scheduler:
    return Scheduler(SchedulerConfig(max_seqs, budget, watermark), BlockManager(num_blocks, block_size))


def render(plan: StepPlan) -> list[tuple[str, int, int]]:
    return [(c.seq.request_id, c.start, c.length) for c in plan.chunks]


def run(s: Scheduler, plan: StepPlan, new_token: int = 99) -> None:
    """Commits a plan and appends a token to every sequence whose prompt is done."""
    s.commit(plan)
    for c in plan.chunks:
        if c.seq.num_computed == len(c.seq.token_ids):
            c.seq.token_ids.append(new_token)


def test_prefill_then_decode_together():
    s = make(budget=8)
    a, b = seq("a", 5), seq("b", 6, first_token=50)
    s.add(a)
    s.add(b)
    plan = s.schedule()
    assert render(plan) == [("a", 0, 5), ("b", 0, 3)]  # b's prompt is chunked by the budget
    run(s, plan)
    plan = s.schedule()
    assert render(plan) == [("a", 5, 1), ("b", 3, 3)]  # a decodes while b finishes its prompt
    run(s, plan)
    assert render(s.schedule()) == [("a", 6, 1), ("b", 6, 1)]


def test_long_prompt_does_not_stall_decode():
    s = make(num_blocks=64, budget=8)
    a = seq("a", 3)
    s.add(a)
    run(s, s.schedule())
    s.add(seq("long", 40, first_token=100))
    for _ in range(5):
        plan = s.schedule()
        assert plan.chunks[0].seq is a and plan.chunks[0].length == 1
        assert plan.num_tokens <= 8
        run(s, plan)


def test_max_num_seqs_bounds_running():
    s = make(max_seqs=2, budget=32)
    for name in "abc":
        s.add(seq(name, 2, first_token=ord(name)))
    plan = s.schedule()
    assert [c.seq.request_id for c in plan.chunks] == ["a", "b"]
    assert [q.request_id for q in s.waiting] == ["c"]


def test_prefix_cache_reuses_full_blocks_and_keeps_last_token():
    s = make(block_size=4)
    first = seq("first", 10)
    s.add(first)
    run(s, s.schedule())
    s.finish(first)
    again = seq("again", 10)  # the same 10 tokens
    s.add(again)
    plan = s.schedule()
    # 8 tokens (two full blocks) come from the cache; tokens 8..9 run.
    assert render(plan) == [("again", 8, 2)]
    assert again.num_cached_prompt_tokens == 8
    assert s.blocks.prefix_hits == 8 and s.blocks.prefix_queries == 20


def test_prefix_cache_never_mixes_different_texts():
    s = make(block_size=4)
    a = seq("a", 8, first_token=1)
    s.add(a)
    run(s, s.schedule())
    s.finish(a)
    # Same second block, different first block: nothing may be reused.
    tokens = [100, 101, 102, 103] + a.token_ids[4:8] + [7]
    b = Sequence("b", 0, tokens, len(tokens), SamplingParams())
    s.add(b)
    assert render(s.schedule()) == [("b", 0, 9)]


def test_identical_whole_prompt_still_runs_its_last_token():
    s = make(block_size=4)
    a = seq("a", 8)
    s.add(a)
    run(s, s.schedule())
    s.finish(a)
    b = seq("b", 8)
    s.add(b)
    assert render(s.schedule()) == [("b", 4, 4)]  # the second block is recomputed for its logits


def test_out_of_blocks_preempts_newest_and_resumes_it():
    s = make(num_blocks=4, block_size=4, budget=16)
    a, b = seq("a", 7), seq("b", 7, first_token=40)
    s.add(a)
    s.add(b)
    plan = s.schedule()
    assert render(plan) == [("a", 0, 7), ("b", 0, 7)]
    run(s, plan)
    plan = s.schedule()  # both at 8 tokens = 2 blocks each; the next token needs a third
    run(s, plan)
    plan = s.schedule()
    assert [q.request_id for q in plan.preempted] == ["b"]
    assert render(plan) == [("a", 8, 1)]
    assert b.status is SeqStatus.WAITING and b.block_table == [] and s.waiting[0] is b
    assert s.num_preemptions == 1
    run(s, plan)
    s.finish(a)
    plan = s.schedule()
    assert plan.chunks[0].seq is b and plan.chunks[0].start + plan.chunks[0].length == len(b.token_ids)


def test_waiting_request_waits_for_memory_instead_of_crashing():
    s = make(num_blocks=3, block_size=4, budget=32, watermark=0)
    a = seq("a", 10)  # 3 blocks
    s.add(a)
    run(s, s.schedule())
    s.add(seq("b", 6, first_token=60))
    plan = s.schedule()
    assert [c.seq.request_id for c in plan.chunks] == ["a"]
    assert [q.request_id for q in s.waiting] == ["b"]


def test_finish_frees_blocks():
    s = make(num_blocks=8, block_size=4)
    a = seq("a", 9)
    s.add(a)
    run(s, s.schedule())
    assert s.blocks.num_free == 5
    s.finish(a)
    assert s.blocks.num_free == 8 and not s.has_work()


def test_config_is_validated():
    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(8, 4)


def test_block_manager_evicts_oldest_freed_first():
    bm = BlockManager(2, 2)
    a, b = bm.allocate(2)
    bm.register(a, b"ka")
    bm.register(b, b"kb")
    bm.release([a])
    bm.release([b])
    (c,) = bm.allocate(1)
    assert c == a  # freed first, reused first; its cache entry is dropped
    assert bm.match_prefix([1, 2])[0] == []
    with pytest.raises(MemoryError):
        bm.allocate(2)

import asyncio

import pytest

from tenor.bench.load import LoadShape, arrival_offsets, run_load
from tenor.bench.metrics import RequestRecord


class _Counting:
    """A send() that records how many calls overlap."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s, self.in_flight, self.peak, self.sent = hold_s, 0, 0, []

    async def __call__(self, prompt: str) -> RequestRecord:
        self.sent.append(prompt)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        return RequestRecord(True, "", self.hold_s, 0.0, (), len(prompt), None, "chunks")


def test_load_shape_is_checked():
    with pytest.raises(ValueError, match="concurrency"):
        LoadShape(concurrency=0)
    with pytest.raises(ValueError, match="rate"):
        LoadShape(concurrency=None, request_rate=0)
    with pytest.raises(ValueError, match="give"):
        LoadShape(concurrency=None, request_rate=None)


def test_poisson_offsets_are_seeded_and_average_one_over_rate():
    offsets = arrival_offsets(4000, rate=20.0, seed=7)
    assert offsets == arrival_offsets(4000, rate=20.0, seed=7)
    assert offsets != arrival_offsets(4000, rate=20.0, seed=8)
    assert offsets[0] == 0.0 and all(b >= a for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1] / (len(offsets) - 1) == pytest.approx(1 / 20.0, rel=0.1)


def test_closed_loop_keeps_exactly_c_in_flight_and_sends_each_prompt_once():
    send = _Counting(hold_s=0.01)
    prompts = [f"p{i}" for i in range(10)]
    result = asyncio.run(run_load(prompts, send, LoadShape(concurrency=3), progress=False))
    assert send.peak == 3
    assert sorted(send.sent) == sorted(prompts)
    # records come back in prompt order whatever order they finished in
    assert [r.output_tokens for r in result.records] == [len(p) for p in prompts]
    assert result.duration_s >= 4 * 0.01  # ceil(10 / 3) rounds of 10 ms


def test_poisson_arrivals_respect_the_concurrency_cap():
    send = _Counting(hold_s=0.05)
    shape = LoadShape(concurrency=2, request_rate=1000.0, seed=1)
    result = asyncio.run(run_load([f"p{i}" for i in range(6)], send, shape, progress=False))
    assert send.peak == 2 and len(result.records) == 6


def test_poisson_arrivals_without_a_cap_overlap_freely():
    send = _Counting(hold_s=0.2)
    shape = LoadShape(concurrency=None, request_rate=1000.0, seed=1)
    asyncio.run(run_load([f"p{i}" for i in range(5)], send, shape, progress=False))
    assert send.peak == 5


def test_a_time_limit_abandons_requests_in_flight_and_sends_no_more():
    send = _Counting(hold_s=0.5)
    prompts = [f"p{i}" for i in range(10)]
    result = asyncio.run(run_load(prompts, send, LoadShape(concurrency=3), progress=False, max_duration_s=0.2))
    assert (len(result.records), result.cut_off, result.not_sent) == (0, 3, 7)
    assert result.duration_s < 0.45  # did not wait for the 0.5 s requests
    assert send.in_flight == 0  # the abandoned sends were cancelled, not left running


def test_a_time_limit_keeps_what_finished_under_poisson_arrivals():
    send = _Counting(hold_s=0.05)
    shape = LoadShape(concurrency=None, request_rate=20.0, seed=3)
    result = asyncio.run(run_load([f"p{i}" for i in range(200)], send, shape, progress=False, max_duration_s=0.5))
    assert len(result.records) > 0 and result.not_sent > 100
    assert len(result.records) + result.cut_off + result.not_sent == 200


def test_the_time_limit_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        asyncio.run(run_load(["p"], _Counting(0.0), LoadShape(), progress=False, max_duration_s=0))

import math

import pytest

from tenor.bench.metrics import RequestRecord, distribution, percentile, summarize, tpot_s


def _record(latency, ttft, gaps=(), tokens=0, ok=True, error="", prompt=None, source="usage"):
    return RequestRecord(ok, error, latency, ttft, tuple(gaps), tokens, prompt, source)


def test_percentile_interpolates_between_ranks_like_numpy():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_nothing_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_tpot_excludes_the_first_token():
    assert tpot_s(_record(latency=1.0, ttft=0.2, tokens=5)) == pytest.approx(0.2)
    assert tpot_s(_record(latency=1.0, ttft=0.2, tokens=1)) is None  # undefined with one token
    assert tpot_s(_record(latency=1.0, ttft=None, tokens=5)) is None
    assert tpot_s(_record(latency=1.0, ttft=0.2, tokens=5, ok=False, error="x")) is None


def test_distribution_reports_milliseconds_and_nothing_for_no_samples():
    d = distribution([0.1, 0.2, 0.3])
    assert (d.count, d.mean_ms, d.p50_ms, d.max_ms) == (
        3,
        pytest.approx(200.0),
        pytest.approx(200.0),
        pytest.approx(300.0),
    )
    empty = distribution([])
    assert empty.count == 0 and empty.mean_ms is None and empty.p99_ms is None


def test_summarize_follows_vllm_definitions():
    records = [
        _record(latency=1.0, ttft=0.2, gaps=(0.2, 0.3, 0.3), tokens=5, prompt=10),
        _record(latency=2.0, ttft=0.4, gaps=(0.8, 0.8), tokens=3, prompt=20),
        _record(latency=0.5, ttft=None, ok=False, error="HTTP 500: boom"),
        _record(latency=0.6, ttft=None, ok=False, error="HTTP 500: boom"),
        _record(latency=9.0, ttft=None, ok=False, error="timeout after 9 s"),
    ]
    s = summarize(records, duration_s=4.0)
    assert (s.completed, s.failed) == (2, 3)
    assert s.total_output_tokens == 8 and s.total_prompt_tokens == 30
    assert s.request_throughput == pytest.approx(0.5)
    assert s.output_throughput == pytest.approx(2.0)
    assert s.total_token_throughput == pytest.approx(38 / 4)
    assert s.token_source == "usage"
    assert s.ttft.count == 2 and s.ttft.mean_ms == pytest.approx(300.0)
    # TPOT per request: (1.0-0.2)/4 = 0.2 and (2.0-0.4)/2 = 0.8
    assert s.tpot.mean_ms == pytest.approx(500.0)
    # ITL pools every gap of every completed request
    assert s.itl.count == 5 and s.itl.mean_ms == pytest.approx(480.0)
    assert s.e2el.max_ms == pytest.approx(2000.0)  # failed requests are not latencies
    assert s.errors == (("HTTP 500: boom", 2), ("timeout after 9 s", 1))


def test_summarize_says_how_tokens_were_counted():
    usage = _record(latency=1.0, ttft=0.1, tokens=2, prompt=5)
    chunks = _record(latency=1.0, ttft=0.1, tokens=2, source="chunks")
    assert summarize([chunks], 1.0).token_source == "chunks"
    mixed = summarize([usage, chunks], 1.0)
    assert mixed.token_source == "mixed"
    assert mixed.total_prompt_tokens is None and mixed.total_token_throughput is None
    nothing = summarize([_record(1.0, None, ok=False, error="x")], 1.0)
    assert nothing.token_source == "none" and nothing.completed == 0 and math.isclose(nothing.output_throughput, 0.0)


def test_summarize_rejects_a_zero_duration():
    with pytest.raises(ValueError, match="duration"):
        summarize([], 0.0)

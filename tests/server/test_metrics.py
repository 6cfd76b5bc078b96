import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tenor.engine.api import EngineStats, FinishReason, RequestOutput, SampleDelta
from tenor.engine.mock_engine import MockEngine
from tenor.server.http.app import build_app
from tenor.server.metrics import ServerMetrics


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple], float]:
    text = metrics.render().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class FixedStats(MockEngine):
    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=3,
            num_waiting=2,
            kv_cache_usage=0.25,
            prefix_cache_queries=40,
            prefix_cache_hits=10,
            num_preemptions=1,
            prompt_tokens_total=100,
            generation_tokens_total=7,
        )


def test_engine_stats_are_read_at_scrape_time_under_vllm_like_names():
    values = samples(ServerMetrics(FixedStats()))
    assert values[("tenor:num_requests_running", ())] == 3
    assert values[("tenor:num_requests_waiting", ())] == 2
    assert values[("tenor:kv_cache_usage_perc", ())] == 0.25
    assert values[("tenor:prefix_cache_queries_total", ())] == 40
    assert values[("tenor:prefix_cache_hits_total", ())] == 10
    assert values[("tenor:num_preemptions_total", ())] == 1
    assert values[("tenor:prompt_tokens_total", ())] == 100
    assert values[("tenor:generation_tokens_total", ())] == 7


def output(index_tokens: dict[int, int], reasons: dict[int, FinishReason] | None = None) -> RequestOutput:
    reasons = reasons or {}
    deltas = tuple(
        SampleDelta(index, tuple(range(count)), "x" * count, -0.5, (), reasons.get(index))
        for index, count in index_tokens.items()
    )
    return RequestOutput("r", deltas, 3, finished=bool(reasons))


def test_a_request_timer_feeds_the_histograms_and_finish_reasons():
    clock = iter([10.0, 10.5, 12.5])  # arrival, first token, end
    metrics = ServerMetrics(MockEngine(), clock=lambda: next(clock))
    timer = metrics.start_request()
    timer.observe(output({0: 1, 1: 1}))
    timer.observe(output({0: 4, 1: 2}, {0: FinishReason.LENGTH, 1: FinishReason.STOP}))
    timer.finish(2)
    values = samples(metrics)
    assert values[("tenor:time_to_first_token_seconds_sum", ())] == 0.5
    assert values[("tenor:e2e_request_latency_seconds_sum", ())] == 2.5
    # 2 s after the first token for the longest sample's 4 more tokens (5 in all): 0.5 s per token.
    assert values[("tenor:time_per_output_token_seconds_sum", ())] == 0.5
    assert values[("tenor:request_success_total", (("finished_reason", "length"),))] == 1
    assert values[("tenor:request_success_total", (("finished_reason", "stop"),))] == 1
    assert values[("tenor:request_success_total", (("finished_reason", "abort"),))] == 0


def test_samples_without_a_finish_reason_count_as_aborted_and_finish_counts_once():
    metrics = ServerMetrics(MockEngine())
    timer = metrics.start_request()
    timer.observe(output({0: 1}))
    timer.finish(1)
    timer.finish(1)
    values = samples(metrics)
    assert values[("tenor:request_success_total", (("finished_reason", "abort"),))] == 1
    assert values[("tenor:time_to_first_token_seconds_count", ())] == 1
    assert values[("tenor:time_per_output_token_seconds_count", ())] == 0  # one token: no gap to time


@pytest.mark.anyio
async def test_the_http_layer_observes_each_request():
    engine = MockEngine()
    await engine.start()
    app = build_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        await client.post("/generate", json={"prompt": "abc", "max_tokens": 3})
        await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 2, "n": 2, "stream": True})
        await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 0})  # rejected: not counted
        response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    assert values[("tenor:request_success_total", (("finished_reason", "length"),))] == 3
    assert values[("tenor:time_to_first_token_seconds_count", ())] == 2
    assert values[("tenor:e2e_request_latency_seconds_count", ())] == 2
    assert values[("tenor:generation_tokens_total", ())] == 7
    assert values[("tenor:prompt_tokens_total", ())] == 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

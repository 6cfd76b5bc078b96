import json

import pytest

from tenor.engine.mock_engine import MockEngine
from tests.server.http.live import asgi_client

pytestmark = pytest.mark.anyio


async def test_generate_returns_the_whole_answer():
    async with asgi_client() as (client, _):
        response = await client.post("/generate", json={"prompt": "abc", "max_tokens": 4})
    assert response.status_code == 200
    assert response.json() == {"response": "defg"}
    assert response.headers["x-request-id"].startswith("gen-")


async def test_generate_default_max_tokens_is_100():
    async with asgi_client() as (client, engine):
        response = await client.post("/generate", json={"prompt": "abc"})
    assert len(response.json()["response"]) == 100
    assert engine.stats().generation_tokens_total == 100


async def test_generate_streams_ndjson_text_chunks():
    async with asgi_client() as (client, _):
        response = await client.post("/generate", json={"prompt": "abc", "max_tokens": 4, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = response.text.splitlines()
    assert [json.loads(line) for line in lines] == [{"text": c} for c in "defg"]


async def test_generate_passes_sampling_fields_to_the_engine():
    seen = []

    class Recording(MockEngine):
        def generate(self, request):
            seen.append(request)
            return super().generate(request)

    body = {"prompt": "abc", "max_tokens": 3, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 7, "stop": "x"}
    async with asgi_client(Recording()) as (client, _):
        assert (await client.post("/generate", json=body)).status_code == 200
    sampling = seen[0].sampling
    fields = (sampling.max_tokens, sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed, sampling.stop)
    assert fields == (3, 0.7, 5, 0.9, 7, ("x",))
    assert seen[0].prompt_token_ids == tuple(MockEngine().tokenizer.encode("abc"))


async def test_generate_is_greedy_by_default():
    seen = []

    class Recording(MockEngine):
        def generate(self, request):
            seen.append(request)
            return super().generate(request)

    async with asgi_client(Recording()) as (client, _):
        await client.post("/generate", json={"prompt": "abc", "max_tokens": 1})
    assert seen[0].sampling.greedy


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"prompt": "abc", "max_tokens": 0}, "max_tokens must be at least 1"),
        ({"prompt": "abc", "max_tokens": "4"}, "'max_tokens'"),
        ({"prompt": 5}, "'prompt'"),
        ({"max_tokens": 4}, "missing required parameter 'prompt'"),
        ({"prompt": "abc", "temperature": -0.5}, "temperature must be >= 0"),
        ({"prompt": "abc", "stop": ["x", ""]}, "must not be empty"),
        ({"prompt": "a" * 300}, "maximum prompt length is 256 tokens; your prompt has 300 tokens"),
        ({"prompt": "abc", "max_tokens": 510}, "'max_tokens' is too large: 510"),
        ({"prompt": ""}, "the prompt is empty"),
    ],
)
async def test_generate_rejects_bad_requests_with_400_then_serves(body, fragment):
    async with asgi_client() as (client, _):
        bad = await client.post("/generate", json=body)
        good = await client.post("/generate", json={"prompt": "abc", "max_tokens": 2})
    assert bad.status_code == 400, bad.text
    assert fragment in bad.json()["error"]["message"]
    assert good.json() == {"response": "de"}


async def test_healthcheck_is_live_only_when_ready():
    engine = MockEngine()
    async with asgi_client(engine, start=False) as (client, _):
        loading = await client.get("/healthcheck")
        await engine.start()
        ready = await client.get("/healthcheck")
        await engine.stop()
        stopped = await client.get("/healthcheck")
    assert loading.status_code == 503
    assert loading.json() == {"response": {"is_live": False, "state": "loading"}}
    assert ready.status_code == 200
    assert ready.json() == {"response": {"is_live": True}}
    assert stopped.status_code == 503
    assert stopped.json()["response"]["state"] == "stopped"


async def test_healthcheck_reports_a_stuck_engine():
    class Stuck(MockEngine):
        def health(self):
            from tenor.engine.api import HealthState

            return HealthState.STUCK

    async with asgi_client(Stuck()) as (client, _):
        response = await client.get("/healthcheck")
    assert response.status_code == 503
    assert response.json()["response"]["state"] == "stuck"

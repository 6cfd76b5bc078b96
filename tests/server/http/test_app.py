import httpx
import pytest

from tenor.engine.mock_engine import MockEngine
from tenor.server.http.app import begin_drain, build_app, context_of
from tests.server.http.live import asgi_client

pytestmark = pytest.mark.anyio


async def test_draining_refuses_new_requests_and_fails_the_healthcheck():
    engine = MockEngine()
    await engine.start()
    app = build_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.post("/generate", json={"prompt": "abc", "max_tokens": 1})).status_code == 200
        begin_drain(app)
        refused = await client.post("/v1/completions", json={"prompt": "abc"})
        health = await client.get("/healthcheck")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert health.status_code == 503
    assert context_of(app).draining


async def test_served_model_name_defaults_to_the_engines():
    async with asgi_client(MockEngine(model_name="tiny")) as (client, _):
        assert (await client.get("/v1/models")).json()["data"][0]["id"] == "tiny"
        assert (await client.post("/v1/completions", json={"model": "tiny", "prompt": "a"})).status_code == 200


def test_two_apps_in_one_process_keep_their_own_metrics():
    first, second = build_app(MockEngine()), build_app(MockEngine())
    assert context_of(first).metrics.registry is not context_of(second).metrics.registry


def test_an_empty_served_name_is_refused():
    with pytest.raises(ValueError, match="served_model_name"):
        build_app(MockEngine(), served_model_name="")


def test_openapi_schema_lists_the_endpoints():
    paths = build_app(MockEngine()).openapi()["paths"]
    assert {"/generate", "/healthcheck", "/v1/completions", "/v1/chat/completions", "/v1/models"} <= set(paths)

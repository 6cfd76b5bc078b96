import pytest

from tenor.server.http.auth import ApiKeyGuard
from tests.server.http.live import asgi_client

pytestmark = pytest.mark.anyio

KEY = "s3cret"
GUARDED = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 1}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 1}),
    ("POST", "/generate", {"prompt": "abc", "max_tokens": 1}),
]


@pytest.mark.parametrize("method, path, body", GUARDED)
async def test_inference_endpoints_need_the_bearer_key(method, path, body):
    async with asgi_client(api_key=KEY) as (client, _):
        missing = await client.request(method, path, json=body)
        wrong = await client.request(method, path, json=body, headers={"Authorization": "Bearer nope"})
        basic = await client.request(method, path, json=body, headers={"Authorization": f"Basic {KEY}"})
        right = await client.request(method, path, json=body, headers={"Authorization": f"Bearer {KEY}"})
    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert refused.headers["www-authenticate"] == "Bearer"
    assert right.status_code == 200


async def test_probes_and_scrapes_stay_open():
    async with asgi_client(api_key=KEY) as (client, _):
        assert (await client.get("/healthcheck")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_without_a_key_everything_is_open():
    async with asgi_client() as (client, _):
        assert (await client.get("/v1/models")).status_code == 200


def test_a_blank_key_is_a_configuration_error():
    with pytest.raises(ValueError, match="api_key"):
        ApiKeyGuard("  ")


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
async def test_the_schema_and_its_viewers_close_with_a_key(path):
    async with asgi_client(api_key=KEY) as (client, _):
        closed = await client.get(path, headers={"Authorization": f"Bearer {KEY}"})
    async with asgi_client() as (client, _):
        open_ = await client.get(path)
    assert closed.status_code == 404 and closed.json()["error"]["code"] == "not_found"
    assert open_.status_code == 200

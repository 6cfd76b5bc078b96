"""Every bad input is a 4xx: schemathesis generates requests from `tenor serve`'s own
/openapi.json (a bounded run on the tiny random Llama) and no answer may be a 5xx."""

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

EXAMPLES_PER_OPERATION = 6  # about 80 requests over all operations: well under a minute


@pytest.mark.slow
def test_no_generated_request_gets_a_5xx(tiny_server):
    schema = schemathesis.openapi.from_url(tiny_server.url + "/openapi.json")
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/generate", "/v1/completions", "/v1/chat/completions", "/tokenize"}
    for operation in operations:
        _fuzz(operation, tiny_server.url, failures)
    assert not failures, "\n".join(failures[:10])


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("seed", [20_000_000_000_000, -(2**63), 2**63 - 1])
def test_any_int64_seed_samples(tiny_server, path, seed):
    body = {
        "prompt": "hello",
        "messages": [{"role": "user", "content": "hi"}],
        "seed": seed,
        "max_tokens": 2,
        "temperature": 1,
    }
    first = httpx.post(tiny_server.url + path, json=body, timeout=60)
    again = httpx.post(tiny_server.url + path, json=body, timeout=60)
    assert first.status_code == 200, first.text
    assert first.json().get("response") == again.json().get("response")  # a seed still means the same tokens


def _fuzz(operation, base_url: str, failures: list[str]) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=operation.as_strategy())
    def call(case):
        if isinstance(case.body, dict):
            # Bounded generations keep the run short (chat's default is the whole context).
            for key in ("max_tokens", "max_completion_tokens"):
                value = case.body.get(key)
                case.body[key] = min(value, 8) if isinstance(value, int) and not isinstance(value, bool) else 8
        response = case.call(base_url=base_url, timeout=60)
        if response.status_code >= 500:
            failures.append(
                f"{operation.method.upper()} {operation.path} {case.body!r}: "
                f"{response.status_code} {response.text[:200]}"
            )

    call()

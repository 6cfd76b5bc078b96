"""One streamed OpenAI-compatible request, timed on the client, as a `RequestRecord`.

Only chunks that carry text count as tokens for TTFT and ITL: chat servers open the
stream with a role-only chunk, which is not a token.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from tenor.bench.metrics import RequestRecord
from tenor.errors import UserError

Endpoint = Literal["completions", "chat"]
ENDPOINT_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_ERROR_CHARS = 160


@dataclass(frozen=True)
class RequestParams:
    model: str
    endpoint: Endpoint
    max_tokens: int
    ignore_eos: bool = False


def build_payload(params: RequestParams, prompt: str) -> dict[str, object]:
    """The JSON body: greedy, streamed, with a usage chunk at the end."""
    body: dict[str, object] = {
        "model": params.model,
        "max_tokens": params.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if params.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if params.ignore_eos:
        body["ignore_eos"] = True
    return body


class _Stream:
    """Timings and counts gathered while reading one SSE stream."""

    def __init__(self, endpoint: Endpoint, start: float) -> None:
        self.endpoint = endpoint
        self.start = start
        self.text_times: list[float] = []
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finished = False  # saw [DONE] or a finish_reason
        self.error = ""

    def feed(self, data: str, now: float) -> None:
        if data == "[DONE]":
            self.finished = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            self.error = f"bad SSE data: {data[:60]!r}"
            return
        if not isinstance(chunk, dict):
            self.error = f"bad SSE data: {data[:60]!r}"
        elif "error" in chunk:
            self.error = f"error in stream: {_error_message(chunk)}"
        else:
            self._take(chunk, now)

    def _take(self, chunk: dict, now: float) -> None:
        choices = chunk.get("choices") or []
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            if self._text(choice):
                self.text_times.append(now)
            if choice.get("finish_reason"):
                self.finished = True
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
            prompt = usage.get("prompt_tokens")
            self.prompt_tokens = prompt if isinstance(prompt, int) else None

    def _text(self, choice: dict) -> str:
        if self.endpoint == "chat":
            delta = choice.get("delta") or {}
            return (delta.get("content") or delta.get("reasoning_content") or "") if isinstance(delta, dict) else ""
        text = choice.get("text")
        return text if isinstance(text, str) else ""

    def record(self, end: float, error: str = "") -> RequestRecord:
        error = error or self.error
        if not error and not self.finished:
            error = "stream ended before [DONE]"
        times = self.text_times
        from_usage = self.usage_tokens is not None
        return RequestRecord(
            ok=not error,
            error=error[:_ERROR_CHARS],
            latency_s=end - self.start,
            ttft_s=times[0] - self.start if times else None,
            chunk_gaps_s=tuple(b - a for a, b in zip(times, times[1:])),
            output_tokens=self.usage_tokens if self.usage_tokens is not None else len(times),
            prompt_tokens=self.prompt_tokens,
            token_source="usage" if from_usage else "chunks",
        )


def _error_message(body: object) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return json.dumps(body)[:_ERROR_CHARS]


async def _read_stream(client: httpx.AsyncClient, url: str, body: dict[str, object], state: _Stream) -> str:
    """Read the response into `state`; returns an error message, "" on success."""
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            raw = (await response.aread()).decode("utf-8", "replace")
            try:
                detail = _error_message(json.loads(raw))
            except json.JSONDecodeError:
                detail = raw.strip()
            return f"HTTP {response.status_code}: {detail}"
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                state.feed(line[5:].strip(), time.perf_counter())
                if state.error:
                    return state.error
    return ""


async def stream_request(
    client: httpx.AsyncClient, url: str, body: dict[str, object], endpoint: Endpoint, timeout_s: float
) -> RequestRecord:
    """Send one streamed request; never raises for server or network trouble, never outlives timeout_s."""
    state = _Stream(endpoint, time.perf_counter())
    try:
        error = await asyncio.wait_for(_read_stream(client, url, body, state), timeout_s)
    except asyncio.TimeoutError:
        error = f"timeout after {timeout_s:g} s"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return state.record(time.perf_counter(), error)


async def fetch_model_name(client: httpx.AsyncClient, base_url: str) -> str:
    """The first model the server lists at /v1/models."""
    url = f"{base_url}/v1/models"
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {url}: {exc or type(exc).__name__}") from None
    if response.status_code != 200:
        raise UserError(f"{url} answered HTTP {response.status_code}")
    try:
        models = response.json().get("data") or []
        return str(models[0]["id"])
    except (ValueError, AttributeError, IndexError, KeyError, TypeError):
        raise UserError(f"{url} lists no models; pass --model") from None


async def fetch_runtime(client: httpx.AsyncClient, base_url: str) -> str | None:
    """What a tenor server says it runs on (`tenor:runtime_info` in /metrics): the CPU, its
    instruction sets, threads and precision; None for servers that do not say (peers)."""
    try:
        response = await client.get(f"{base_url}/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        if line.startswith("tenor:runtime_info{"):
            return line[len("tenor:runtime_info{") : line.rfind("}")]
    return None

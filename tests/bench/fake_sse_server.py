"""A scripted OpenAI-compatible SSE server for the benchmark tests.

The model name in each request picks the behaviour, so one server covers every case:
  fake           CHUNKS text chunks, DELAY_S apart after FIRST_DELAY_S; usage says 2 tokens a chunk
  fake-no-usage  the same without the usage chunk
  fake-bad       HTTP 400 with an OpenAI error body
  fake-midway    two chunks, then an error event
  fake-hang      one chunk, then silence for HANG_S
GET /client-ports lists the client's source port of every generation request so far.
"""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

CHUNKS = 5
FIRST_DELAY_S = 0.05
DELAY_S = 0.01
HANG_S = 30.0


def _chunk(chat: bool, text: str | None, finish: str | None = None) -> str:
    if chat:
        choice = {"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    return f"data: {json.dumps({'choices': [choice]})}\n\n"


async def _events(model: str, chat: bool, max_tokens: int) -> AsyncIterator[str]:
    if chat:  # like real chat servers: a role-only chunk first, which is not a token
        yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'role': 'assistant'}}]})}\n\n"
    await asyncio.sleep(FIRST_DELAY_S)
    chunks = min(CHUNKS, max_tokens)
    for i in range(chunks):
        if i:
            await asyncio.sleep(DELAY_S)
        yield _chunk(chat, f" w{i}")
        if model == "fake-midway" and i == 1:
            yield f"data: {json.dumps({'error': {'message': 'engine fell over', 'code': 500}})}\n\n"
            return
        if model == "fake-hang":
            await asyncio.sleep(HANG_S)
    yield _chunk(chat, None, "length")
    if model != "fake-no-usage":
        usage = {"prompt_tokens": 7, "completion_tokens": 2 * chunks, "total_tokens": 7 + 2 * chunks}
        yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def build_fake_app() -> FastAPI:
    app = FastAPI()
    client_ports: list[int] = []  # the client's source port for each generation request

    async def answer(request: Request, chat: bool) -> object:
        client_ports.append(request.client.port if request.client else 0)
        body = await request.json()
        model = body.get("model", "fake")
        if model == "fake-bad":
            error = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error", "code": 400}}
            return JSONResponse(error, status_code=400)
        return StreamingResponse(_events(model, chat, int(body["max_tokens"])), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> object:
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> object:
        return await answer(request, chat=True)

    @app.get("/client-ports")
    async def ports() -> list[int]:
        return client_ports

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

    return app

"""A naive HF transformers baseline with an OpenAI-compatible face, for side-by-side benchmarks.

    python benchmarks/hf_server.py --gguf PATH --port 8001 [--dtype bfloat16|float32] [--packed]

One request generates at a time (a lock), with `model.generate`; others wait their turn.
That is the point: it is what serving looks like without batching. Routes:
/v1/completions, /v1/chat/completions (SSE when "stream", usage with
stream_options.include_usage), /v1/models, /health.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncGenerator, AsyncIterator, Literal, cast

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GgufConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

MAX_NEW_TOKENS = 4096


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    model: str | None = None
    max_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's and llama.cpp's extension: always make max_tokens


class CompletionBody(_Sampling):
    prompt: str = Field(min_length=1)


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatBody(_Sampling):
    messages: list[Message] = Field(min_length=1)


@dataclass(frozen=True)
class Job:
    prompt_ids: list[int]
    body: _Sampling
    chat: bool


class _QueueStreamer(BaseStreamer):
    """Hands each new token id from the generate thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
        self.loop, self.queue, self.prompt_seen = loop, queue, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # generate() first passes the prompt itself
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, token)

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)


class _Cancelled(StoppingCriteria):
    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> bool:
        return self.flag.is_set()


class Baseline:
    """An HF model and tokenizer that generate for one request at a time."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> None:
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        self.lock = threading.Lock()  # one generation at a time: the naive baseline

    @classmethod
    def from_gguf(cls, gguf: Path, dtype: torch.dtype, name: str, packed: bool = False) -> "Baseline":
        """Dense weights unless `packed`: the packed path looks for a matmul kernel on the hub
        (unreachable here) and otherwise unpacks every weight on every forward."""
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=dtype, quantization_config=GgufConfig(dequantize=not packed)
        )
        return cls(model, tokenizer, name)

    def prompt_ids(self, body: CompletionBody | ChatBody) -> list[int]:
        if isinstance(body, ChatBody):
            messages = [m.model_dump() for m in body.messages]
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(body.prompt)["input_ids"]

    def _generate(self, job: Job, streamer: _QueueStreamer, cancel: threading.Event) -> None:
        try:
            with self.lock, torch.inference_mode():
                if cancel.is_set():
                    return
                greedy = job.body.temperature == 0.0
                self.model.generate(
                    torch.tensor([job.prompt_ids]),
                    max_new_tokens=job.body.max_tokens,
                    min_new_tokens=job.body.max_tokens if job.body.ignore_eos else None,
                    do_sample=not greedy,
                    temperature=None if greedy else job.body.temperature,
                    top_p=None if greedy else job.body.top_p,
                    top_k=None,
                    eos_token_id=self.tokenizer.eos_token_id,
                    pad_token_id=self.tokenizer.eos_token_id,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([_Cancelled(cancel)]),
                )
        finally:
            streamer.end()

    async def tokens(self, job: Job) -> AsyncGenerator[str, None]:
        """One text piece per generated token ("" while a UTF-8 character is incomplete or
        for special tokens), so callers can count tokens by counting pieces."""
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        streamer = _QueueStreamer(asyncio.get_running_loop(), queue)
        threading.Thread(target=self._generate, args=(job, streamer, cancel), daemon=True).start()
        ids: list[int] = []
        sent = ""
        try:
            while (token := await queue.get()) is not None:
                ids.append(token)
                text = cast(str, self.tokenizer.decode(ids, skip_special_tokens=True))  # one sequence: one str
                if text.endswith("\ufffd"):
                    yield ""
                    continue
                yield text[len(sent) :]
                sent = text
        finally:
            cancel.set()  # the client left or we finished: free the lock for the next request


def _chunk(job: Job, rid: str, text: str | None, finish: str | None) -> dict[str, object]:
    if job.chat:
        delta = {} if text is None else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    kind = "chat.completion.chunk" if job.chat else "text_completion"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": job.body.model, "choices": [choice]}


def _usage(job: Job, generated: int) -> dict[str, int]:
    prompt = len(job.prompt_ids)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


async def _sse(baseline: Baseline, job: Job) -> AsyncIterator[str]:
    rid = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
    if job.chat:
        first = _chunk(job, rid, None, None)
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}  # type: ignore[index]
        yield f"data: {json.dumps(first)}\n\n"
    count = 0
    async with contextlib.aclosing(baseline.tokens(job)) as pieces:
        async for piece in pieces:
            count += 1
            if piece:
                yield f"data: {json.dumps(_chunk(job, rid, piece, None))}\n\n"
    finish = "length" if count >= job.body.max_tokens else "stop"
    yield f"data: {json.dumps(_chunk(job, rid, None, finish))}\n\n"
    if job.body.stream_options and job.body.stream_options.include_usage:
        tail = _chunk(job, rid, None, None) | {"choices": [], "usage": _usage(job, count)}
        yield f"data: {json.dumps(tail)}\n\n"
    yield "data: [DONE]\n\n"


async def _whole(baseline: Baseline, job: Job) -> dict[str, object]:
    async with contextlib.aclosing(baseline.tokens(job)) as stream:
        pieces = [piece async for piece in stream]
    text = "".join(pieces)
    finish = "length" if len(pieces) >= job.body.max_tokens else "stop"
    if job.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
    kind = "chat.completion" if job.chat else "text_completion"
    rid = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
    return {
        "id": rid,
        "object": kind,
        "created": int(time.time()),
        "model": job.body.model,
        "choices": [choice],
        "usage": _usage(job, len(pieces)),
    }


def _error(status: int, message: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def build_app(baseline: Baseline) -> FastAPI:
    app = FastAPI(title="HF transformers baseline")

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}")

    async def serve(body: CompletionBody | ChatBody) -> object:
        if body.model not in (None, baseline.name):
            return _error(404, f"model {body.model!r} is not served here; this server has {baseline.name!r}")
        body.model = baseline.name
        job = Job(baseline.prompt_ids(body), body, isinstance(body, ChatBody))
        if body.stream:
            return StreamingResponse(_sse(baseline, job), media_type="text/event-stream")
        return await _whole(baseline, job)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody) -> object:
        return await serve(body)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody) -> object:
        return await serve(body)

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": baseline.name, "object": "model", "owned_by": "hf-baseline"}]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, type=Path, help="GGUF file to load with transformers")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    # Measured here at batch 1 on SmolLM2: bfloat16 30 tokens/s, float32 22 (the LM head dominates).
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--packed", action="store_true", help="keep the GGUF blocks packed instead of dense weights")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--name", default=None, help="model name at /v1/models (default: the file's stem)")
    args = parser.parse_args()
    if not args.gguf.is_file():
        parser.error(f"no such GGUF file: {args.gguf}")
    if args.threads:
        torch.set_num_threads(args.threads)
    baseline = Baseline.from_gguf(args.gguf, getattr(torch, args.dtype), args.name or args.gguf.stem, args.packed)
    uvicorn.run(build_app(baseline), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

"""HTTP sampling fields -> the engine's SamplingParams, with the checks the engine leaves
to surfaces (stop-sequence caps, unsupported OpenAI parameters)."""

from __future__ import annotations

from tenor.engine.api import SamplingParams
from tenor.server.http.errors import bad_request
from tenor.server.http.schemas import SamplingFields, Stop

MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 256


def stop_strings(stop: Stop) -> tuple[str, ...]:
    """OpenAI's `stop`: one string or a list; bounded, because every one is matched per token."""
    if stop is None:
        return ()
    strings = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(strings) > MAX_STOP_SEQUENCES:
        raise bad_request(f"'stop' may hold at most {MAX_STOP_SEQUENCES} sequences, got {len(strings)}", "stop")
    for text in strings:
        if not text:
            raise bad_request("'stop' sequences must not be empty", "stop")
        if len(text) > MAX_STOP_CHARS:
            raise bad_request(f"'stop' sequences must be at most {MAX_STOP_CHARS} characters long", "stop")
    return strings


def top_k_value(top_k: int | None) -> int:
    """vLLM clients send -1 for 'no top-k'; the engine says 0."""
    return 0 if top_k is None or top_k == -1 else top_k


def openai_sampling(fields: SamplingFields, max_tokens: int, logprobs: int | None) -> SamplingParams:
    """SamplingParams for /v1/*; its constructor raises InvalidRequestError (a 400) on bad values."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if fields.temperature is None else fields.temperature,
        top_k=top_k_value(fields.top_k),
        top_p=1.0 if fields.top_p is None else fields.top_p,
        seed=fields.seed,
        n=fields.n,
        stop=stop_strings(fields.stop),
        logprobs=logprobs,
        ignore_eos=fields.ignore_eos,
    )


def reject_unsupported(fields: SamplingFields) -> None:
    """Parameters tenor knows but does not implement: silently ignoring them would return
    answers the client did not ask for, so anything but the neutral value is a 400."""
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(fields, name)
        if value not in (None, 0.0):
            raise bad_request(f"'{name}' is not supported (only 0)", name, code="unsupported_parameter")
    if fields.logit_bias:
        raise bad_request("'logit_bias' is not supported", "logit_bias", code="unsupported_parameter")
    if fields.stream_options is not None and not fields.stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")

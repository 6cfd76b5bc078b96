"""The one request pipeline: every prompt kind x every limit, with the one error each gets,
and a property-based fuzz of the whole path (any input: a request or InvalidRequestError)."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenor.engine.api import EngineLimits, InvalidRequestError, SamplingParams
from tenor.engine.mock_engine import MockEngine
from tenor.server.error_table import ModelNotServedError, classify
from tenor.server.pipeline import ChatPrompt, RequestPipeline, TextPrompt, TokenPrompt

LIMITS = EngineLimits(max_prefill_predict_length=40, max_target_length=48, max_samples=4)


def pipeline(tokenized: bool = False) -> RequestPipeline:
    return RequestPipeline(MockEngine(limits=LIMITS), tokenized)


def chat(text: str) -> ChatPrompt:
    return ChatPrompt(({"role": "user", "content": text},))


# Each prompt kind, built to be `length` tokens long (the byte tokenizer's chat template adds
# 17 bytes: "user: " + "\n" + "assistant:").
KINDS = {
    "text": lambda length: (TextPrompt("a" * length), False),
    "token_ids": lambda length: (TokenPrompt((100,) * length), False),
    "tokenized_text": lambda length: (TextPrompt(",".join(["100"] * length)), True),
    "chat": lambda length: (chat("a" * (length - 17)), False),
}
LIMIT_CASES = [
    # (prompt length, sampling, the error's words or None)
    (20, SamplingParams(max_tokens=4), None),
    (40, SamplingParams(max_tokens=8), None),
    (41, SamplingParams(max_tokens=1), "maximum prompt length is 40 tokens; your prompt has 41"),
    (40, SamplingParams(max_tokens=9), "'max_tokens' is too large: 9"),
    (20, SamplingParams(max_tokens=1, n=5), "n must be at most 4"),
]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("length, sampling, error", LIMIT_CASES)
def test_every_prompt_kind_meets_every_limit(kind, length, sampling, error):
    prompt, tokenized = KINDS[kind](length)
    pipe = pipeline(tokenized)
    ids = pipe.prompt_ids(prompt)
    assert len(ids) == length
    if error is None:
        request = pipe.request("t", ids, sampling)
        assert request.prompt_token_ids == ids and request.request_id.startswith("t-")
    else:
        with pytest.raises(InvalidRequestError, match=error):
            pipe.request("t", ids, sampling)


@pytest.mark.parametrize(
    "prompt, tokenized, error",
    [
        (TextPrompt("x\ud800", field="prompt[2]"), False, "'prompt\\[2\\]' holds a lone surrogate at character 1"),
        (chat("\udfff"), False, "'messages\\[0\\].content' holds a lone surrogate"),
        (TokenPrompt((1, 259)), False, "'prompt' token id 259 is out of range \\(valid ids: 0 to 258\\)"),
        (TokenPrompt((-1,), field="token_content.token_ids"), False, "'token_content.token_ids' token id -1"),
        (TextPrompt("1,x"), True, "'prompt': token ids: item 1 is 'x'"),
        (TextPrompt("1,999"), True, "token id 999 is out of range"),
        (chat("hi"), True, "reads token ids and has no chat template"),
        (ChatPrompt(()), False, "'messages' must not be empty"),
    ],
)
def test_bad_prompts_name_their_field(prompt, tokenized, error):
    with pytest.raises(InvalidRequestError, match=error):
        pipeline(tokenized).prompt_ids(prompt)


def test_empty_prompt_and_score_limits():
    pipe = pipeline()
    with pytest.raises(InvalidRequestError, match="the prompt is empty"):
        pipe.request("t", pipe.prompt_ids(TextPrompt("")), SamplingParams())
    pipe.check_score((5,) * 30, (6,) * 10)
    with pytest.raises(InvalidRequestError, match="prefix \\+ suffix is 41 tokens; this model scores at most 40"):
        pipe.check_score((5,) * 30, (6,) * 11)
    with pytest.raises(InvalidRequestError, match="the suffix is empty"):
        pipe.check_score((5,), ())


def test_tokenized_outputs_are_ids_and_samples_collect():
    async def main():
        pipe = pipeline(tokenized=True)
        await pipe.engine.start()
        ids = pipe.prompt_ids(TextPrompt("100,101"))
        samples = await pipe.collect(pipe.request("t", ids, SamplingParams(max_tokens=3, n=2)))
        await pipe.engine.stop()
        return samples

    samples = asyncio.run(main())
    assert [s.text for s in samples] == ["102,103,104", "103,104,105"]
    assert [s.token_ids for s in samples] == [[102, 103, 104], [103, 104, 105]]
    assert samples[0].cumulative_logprob == -1.5


@pytest.mark.parametrize(
    "tokenized, accepts_text, prompt, reads_ids",
    [
        (True, True, TextPrompt("100,101"), True),
        (True, True, TextPrompt(" 100 , 101 "), True),
        (True, True, TextPrompt("hello, world"), False),
        (True, True, TextPrompt("100,abc"), False),  # not ids, so text
        (True, False, TextPrompt("hello"), True),  # ids only: prompt_ids then refuses it
        (False, False, TextPrompt("100,101"), False),
        (True, True, TokenPrompt((100, 101)), True),
    ],
)
def test_for_prompt_reads_ids_or_text(tokenized, accepts_text, prompt, reads_ids):
    pipe = RequestPipeline(MockEngine(limits=LIMITS), tokenized, accepts_text)
    assert pipe.for_prompt(prompt).tokenized is reads_ids


def test_a_text_prompt_to_a_model_that_accepts_text_is_answered_in_text():
    async def main():
        pipe = RequestPipeline(MockEngine(limits=LIMITS), tokenized=True, accepts_text=True)
        await pipe.engine.start()
        results = []
        for text in ("100,101", "ab"):
            request_pipe = pipe.for_prompt(TextPrompt(text))
            ids = request_pipe.prompt_ids(TextPrompt(text))
            results.append(await request_pipe.collect(request_pipe.request("t", ids, SamplingParams(max_tokens=2))))
        await pipe.engine.stop()
        return results

    as_ids, as_text = asyncio.run(main())
    assert as_ids[0].text == "102,103"
    # MockEngine continues with the next id: after "ab" come the ids of "c" and "d".
    assert as_text[0].text == "cd" and len(as_text[0].token_ids) == 2


def test_accepts_text_needs_a_tokenized_model():
    import dataclasses

    from tenor import registry

    spmd = registry.get("test.LmSpmdRandom")
    assert spmd.tokenized and spmd.accepts_text
    with pytest.raises(ValueError, match="accepts_text only applies to a tokenized model"):
        dataclasses.replace(spmd, tokenized=False)


def test_error_table_gives_each_error_one_status_everywhere():
    import grpc

    from tenor.engine.api import EngineUnavailableError, OverloadedError
    from tenor.errors import UserError

    cases = [
        (InvalidRequestError("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (UserError("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (OverloadedError("x"), 429, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (EngineUnavailableError("x"), 503, grpc.StatusCode.UNAVAILABLE),
        (ModelNotServedError("x"), 404, grpc.StatusCode.NOT_FOUND),
        (RuntimeError("x"), 500, grpc.StatusCode.INTERNAL),
        (ZeroDivisionError(), 500, grpc.StatusCode.INTERNAL),
    ]
    for exc, status, code in cases:
        assert (classify(exc).http_status, classify(exc).grpc_code) == (status, code), exc


# Any text (surrogates included), any ids, any sampling numbers: the pipeline either builds a
# request within the limits or raises InvalidRequestError; nothing else escapes.
prompts = st.one_of(
    st.builds(TextPrompt, st.text(max_size=30)),
    st.builds(TokenPrompt, st.lists(st.integers(-5, 400), max_size=30).map(tuple)),
    st.builds(lambda t: chat(t), st.text(max_size=30)),
)


@settings(max_examples=300, deadline=None)
@given(
    prompt=prompts,
    tokenized=st.booleans(),
    max_tokens=st.integers(-3, 40),
    n=st.integers(-1, 6),
    temperature=st.floats(allow_nan=True),
    seed=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
)
def test_fuzz_the_pipeline(prompt, tokenized, max_tokens, n, temperature, seed):
    pipe = pipeline(tokenized)
    try:
        sampling = SamplingParams(max_tokens=max_tokens, n=n, temperature=temperature, seed=seed)
        ids = pipe.prompt_ids(prompt)
        request = pipe.request("f", ids, sampling)
    except InvalidRequestError:
        return
    assert 0 < len(request.prompt_token_ids) <= LIMITS.max_prefill_predict_length
    assert len(request.prompt_token_ids) + sampling.max_tokens <= LIMITS.max_target_length
    assert all(0 <= i < 259 for i in request.prompt_token_ids)

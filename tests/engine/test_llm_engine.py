"""The real engine on a tiny random model: batching, memory pressure, sampling, aborts."""

import asyncio
import dataclasses

import pytest

from tenor import registry
from tenor.engine.api import (
    FinishReason,
    GenerateRequest,
    HealthState,
    InvalidRequestError,
    OverloadedError,
    SamplingParams,
)
from tenor.engine.factory import EngineOptions
from tenor.engine.llm_engine import LLMEngine

TINY = registry.get("test.TinyLlamaRandom")
PROMPTS = ["hello world", "a", "the quick brown fox jumps over the lazy dog " * 3, "abc"]


def make_engine(servable=TINY, **options) -> LLMEngine:
    return LLMEngine(servable, None, EngineOptions(**options))


async def collect(engine, prompt, **sampling):
    ids = tuple(engine.tokenizer.encode(prompt))
    outputs = [o async for o in engine.generate(GenerateRequest(prompt, ids, SamplingParams(**sampling)))]
    n = sampling.get("n", 1)
    tokens = [[t for o in outputs for d in o.deltas if d.index == i for t in d.token_ids] for i in range(n)]
    texts = ["".join(d.text for o in outputs for d in o.deltas if d.index == i) for i in range(n)]
    last = {d.index: d for o in outputs for d in o.deltas}
    assert outputs[-1].finished
    return tokens, texts, last


def run(coro):
    return asyncio.run(coro)


def test_batched_equals_alone_and_health():
    async def main():
        engine = make_engine()
        assert engine.health() is HealthState.LOADING
        await engine.start()
        assert engine.health() is HealthState.READY
        alone = [(await collect(engine, p, max_tokens=12, ignore_eos=True))[0] for p in PROMPTS]
        together = await asyncio.gather(*(collect(engine, p, max_tokens=12, ignore_eos=True) for p in PROMPTS))
        await engine.stop()
        assert engine.health() is HealthState.STOPPED
        return alone, [t[0] for t in together]

    alone, together = run(main())
    assert alone == together
    assert all(len(t[0]) == 12 for t in alone)


def test_a_started_engine_lets_the_event_loop_hand_back_the_gil_quickly():
    import sys

    from tenor.engine.llm_engine import GIL_SWITCH_INTERVAL_S

    async def main():
        engine = make_engine(warmup=False)
        await engine.start()
        await engine.stop()

    sys.setswitchinterval(0.005)
    try:
        run(main())
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def test_chunked_prefill_and_preemption_do_not_change_tokens():
    long_servable = dataclasses.replace(TINY, max_prefill_predict_length=400, max_target_length=480)
    prompts = ["x" * 300, "y" * 120, "z" * 50]

    async def generate_all(prompts, max_tokens=20, **options):
        engine = make_engine(long_servable, **options)
        await engine.start()
        results = await asyncio.gather(*(collect(engine, p, max_tokens=max_tokens, ignore_eos=True) for p in prompts))
        stats = engine.stats()
        await engine.stop()
        return [r[0] for r in results], stats

    reference, _ = run(generate_all(prompts))
    chunked, _ = run(generate_all(prompts, max_num_batched_tokens=16))
    assert chunked == reference
    # 480 tokens of KV (the minimum) for three sequences that grow to 180 each: the prompts
    # fit at admission, then decoding runs out of blocks and someone is preempted.
    growing = ["x" * 140, "y" * 141, "z" * 139]
    reference, _ = run(generate_all(growing, max_tokens=40))
    starved, stats = run(generate_all(growing, max_tokens=40, kv_cache_bytes=480 * 2 * 2 * 2 * 16 * 4))
    assert starved == reference
    assert stats.num_preemptions > 0 and stats.kv_cache_usage == 0.0


def test_prefix_cache_hit_gives_same_tokens():
    async def main():
        engine = make_engine()
        await engine.start()
        prompt = "a shared system prompt that is long enough to fill blocks. " * 2
        first = await collect(engine, prompt, max_tokens=8)
        second = await collect(engine, prompt, max_tokens=8)
        stats = engine.stats()
        await engine.stop()
        return first[0], second[0], stats

    first, second, stats = run(main())
    assert first == second
    assert stats.prefix_cache_hits > 0


def test_seeded_sampling_is_reproducible_and_n_samples_have_scores():
    async def main():
        engine = make_engine()
        await engine.start()
        a = await collect(engine, "abc", max_tokens=10, temperature=1.0, seed=7, n=3, ignore_eos=True)
        b = await collect(engine, "abc", max_tokens=10, temperature=1.0, seed=7, n=3, ignore_eos=True)
        c = await collect(engine, "abc", max_tokens=10, temperature=1.0, seed=8, n=3, ignore_eos=True)
        k = await collect(engine, "abc", max_tokens=10, temperature=1.0, top_k=1, ignore_eos=True)
        g = await collect(engine, "abc", max_tokens=10, ignore_eos=True)
        await engine.stop()
        return a, b, c, k, g

    a, b, c, k, g = run(main())
    assert a[0] == b[0] and a[0] != c[0]
    assert len(set(map(tuple, a[0]))) > 1  # the samples differ from each other
    assert all(d.cumulative_logprob < 0 for d in a[2].values())
    assert k[0] == g[0]  # top_k=1 is greedy


def test_score_matches_generation_logprobs():
    async def main():
        engine = make_engine()
        await engine.start()
        prompt_ids = engine.tokenizer.encode("abc")
        tokens, _, last = await collect(engine, "abc", max_tokens=6, ignore_eos=True)
        score = await engine.score(prompt_ids, tokens[0])
        await engine.stop()
        return score, last[0].cumulative_logprob

    score, generated = run(main())
    assert score == pytest.approx(generated, abs=1e-4)


def test_stops_and_logprobs():
    async def main():
        engine = make_engine()
        await engine.start()
        tokens, texts, _ = await collect(engine, "hello", max_tokens=8, ignore_eos=True)
        stop_id = await collect(engine, "hello", max_tokens=8, stop_token_ids=(tokens[0][2],), ignore_eos=True)
        text = texts[0]
        stop_str = (
            await collect(engine, "hello", max_tokens=8, stop=(text[3:5],), ignore_eos=True) if len(text) >= 5 else None
        )
        lp = await collect(engine, "hello", max_tokens=3, logprobs=2, ignore_eos=True)
        await engine.stop()
        return tokens, text, stop_id, stop_str, lp

    tokens, text, stop_id, stop_str, lp = run(main())
    first_stop = tokens[0].index(tokens[0][2])
    assert stop_id[0][0] == tokens[0][: first_stop + 1]
    assert stop_id[2][0].finish_reason is FinishReason.STOP
    if stop_str is not None:
        assert stop_str[1][0] == text[: text.index(text[3:5])]  # the text stops before the stop string
        assert stop_str[2][0].finish_reason is FinishReason.STOP
    assert lp[2][0].finish_reason is FinishReason.LENGTH


def test_abort_frees_slot_and_kv_and_overload_is_reported():
    async def main():
        engine = make_engine(max_waiting=1)
        await engine.start()
        ids = tuple(engine.tokenizer.encode("abc"))
        streams = [
            engine.generate(GenerateRequest(f"r{i}", ids, SamplingParams(max_tokens=400, ignore_eos=True)))
            for i in range(TINY.max_batch_size + 1)
        ]
        with pytest.raises(OverloadedError):
            engine.generate(GenerateRequest("extra", ids, SamplingParams(max_tokens=4)))
        # Every stream is started (a generator never started has no code to run on close): the
        # 8 running ones wait for their next token, the queued one for its first.
        nexts = [asyncio.ensure_future(s.__anext__()) for s in streams]
        first = await nexts[0]
        assert first.deltas
        for pending in nexts[1:]:
            pending.cancel()  # the caller goes away mid-wait: the stream's cleanup aborts it
        await asyncio.gather(*nexts[1:], return_exceptions=True)
        for s in streams:
            await s.aclose()
        for _ in range(200):
            if engine.stats().num_running == 0 and engine.stats().kv_cache_usage == 0.0:
                break
            await asyncio.sleep(0.01)
        stats = engine.stats()
        still_works = await collect(engine, "abc", max_tokens=3)
        await engine.stop()
        return stats, still_works

    stats, still_works = run(main())
    assert stats.num_running == 0 and stats.kv_cache_usage == 0.0
    assert stats.generation_tokens_total < TINY.max_batch_size * 400 // 2  # aborted, not run to the end
    assert len(still_works[0][0]) >= 1


def test_bad_requests_are_refused_with_numbers():
    async def main():
        engine = make_engine()
        await engine.start()
        try:
            with pytest.raises(InvalidRequestError, match="256"):
                engine.generate(GenerateRequest("long", tuple([5] * 300), SamplingParams()))
            with pytest.raises(InvalidRequestError, match="max_tokens"):
                engine.generate(GenerateRequest("big", (5, 6), SamplingParams(max_tokens=600)))
            with pytest.raises(InvalidRequestError):
                await engine.score([5], [])
            with pytest.raises(InvalidRequestError, match="out of range"):
                engine.generate(GenerateRequest("vocab", (5, 100000), SamplingParams()))
            with pytest.raises(InvalidRequestError, match="out of range"):
                await engine.score([5], [-1])
        finally:
            await engine.stop()

    run(main())


def test_int8_kv_cache_runs_and_mostly_agrees():
    async def main(**options):
        engine = make_engine(**options)
        await engine.start()
        out = await collect(engine, "hello world", max_tokens=16, ignore_eos=True)
        await engine.stop()
        return out[0][0]

    full = run(main())
    quant = run(main(quantize_kv_cache=True))
    assert len(quant) == 16
    assert quant[:4] == full[:4]


@pytest.mark.parametrize(
    "quantize, kv_options, stored",
    [("none", {}, "float32"), ("int8", {}, "bfloat16"), ("int8", {"quantize_kv_cache": True}, "int8")],
)
def test_the_kv_cache_is_stored_as_the_runtime_line_says(quantize, kv_options, stored):
    """float32 weights keep float32 K/V (exact); int8 weights cache K/V in bf16 (half the bytes);
    --quantize-kv-cache wins over both. What /metrics and the startup line report is what is
    stored."""
    from tenor.hardware import fbgemm_fp16_available
    from tenor.models import native

    if quantize == "int8" and not (native.available() and fbgemm_fp16_available()):
        pytest.skip("int8 weights need tenor's native kernels and FBGEMM (an x86 torch)")

    async def main():
        engine = make_engine(dataclasses.replace(TINY, dtype="float32", quantize=quantize), **kv_options)
        await engine.start()
        tokens = (await collect(engine, "hello world", max_tokens=6, ignore_eos=True))[0][0]
        runtime, kv = engine.stats().runtime, engine._runner.cache.kv
        await engine.stop()
        return tokens, runtime, kv.dtype

    tokens, runtime, dtype = run(main())
    assert len(tokens) == 6
    assert runtime.kv_cache == stored and str(dtype) == f"torch.{stored}"
    assert f"K/V cached in {stored}" in runtime.describe()

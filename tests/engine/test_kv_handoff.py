"""Prefill on one engine, decode on another: the prompt's KV blocks exported, sent through the
wire form, imported into the second engine's cache; tokens equal an interleaved engine's, the
prefix cache is honoured, and no KV block leaks on any path."""

import asyncio

import pytest
import torch

from tenor import registry
from tenor.disagg.kv_blocks import KVBlocks, decode, encode
from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.llm_engine import LLMEngine
from tenor.engine.options import EngineOptions

TINY = registry.get("test.TinyLlamaRandom")
PROMPTS = [tuple(range(3, 3 + 53)), tuple(range(40, 40 + 37)), tuple(range(100, 100 + 16)), (5, 6, 7)]


def make_engine(**options) -> LLMEngine:
    return LLMEngine(TINY, None, EngineOptions(warmup=False, **options))


async def tokens_of(engine, prompt, incoming_kv=None, **sampling):
    request = GenerateRequest("r", prompt, SamplingParams(**sampling))
    out = [o async for o in engine.generate(request, incoming_kv=incoming_kv)]
    n = sampling.get("n", 1)
    return [[t for o in out for d in o.deltas if d.index == i for t in d.token_ids] for i in range(n)]


def over_the_wire(blocks: KVBlocks) -> KVBlocks:
    return decode(encode(blocks, chunk_bytes=4096), max_bytes=1 << 30)


def all_free(engine) -> bool:
    return engine._blocks.num_free == engine._blocks.num_blocks


@pytest.mark.parametrize("quantize_kv_cache", [False, True])
def test_disaggregated_tokens_equal_interleaved(quantize_kv_cache):
    sampling = [
        dict(max_tokens=10, ignore_eos=True),
        dict(max_tokens=10, ignore_eos=True, n=2, temperature=0.8, seed=7, logprobs=2),
    ]

    async def main():
        prefill, decoder, interleaved = (make_engine(quantize_kv_cache=quantize_kv_cache) for _ in range(3))
        for engine in (prefill, decoder, interleaved):
            await engine.start()
        results = []
        for prompt in PROMPTS:
            for params in sampling:
                moved = over_the_wire(await prefill.prefill_export(prompt))
                assert moved.num_blocks == len(prompt) // 16
                assert (moved.kv.dtype == torch.int8) == quantize_kv_cache
                hits_before = decoder.stats().prefix_cache_hits
                got = await tokens_of(decoder, prompt, moved, **params)
                want = await tokens_of(interleaved, prompt, **params)
                results.append((got, want))
                if moved.num_blocks and len(prompt) % 16:
                    assert decoder.stats().prefix_cache_hits - hits_before >= moved.num_blocks * 16
                assert all_free(decoder) and all_free(prefill)
        for engine in (prefill, decoder, interleaved):
            await engine.stop()
        return results

    for got, want in asyncio.run(main()):
        assert got == want


def test_blocks_the_decoder_holds_are_not_sent_again():
    prompt = tuple(range(3, 3 + 70))  # 4 full blocks and a tail

    async def main():
        prefill, decoder = make_engine(), make_engine()
        await prefill.start()
        await decoder.start()
        assert decoder.held_prefix_blocks(prompt) == 0
        first = over_the_wire(await prefill.prefill_export(prompt, decoder.held_prefix_blocks(prompt)))
        await tokens_of(decoder, prompt, first, max_tokens=3)
        longer = prompt + tuple(range(200, 220))  # the same prefix, one more full block
        skip = decoder.held_prefix_blocks(longer)
        second = over_the_wire(await prefill.prefill_export(longer, skip))
        got = await tokens_of(decoder, longer, second, max_tokens=6, ignore_eos=True)
        await decoder.stop()
        interleaved = make_engine()
        await interleaved.start()
        want = await tokens_of(interleaved, longer, max_tokens=6, ignore_eos=True)
        await interleaved.stop()
        await prefill.stop()
        return first, skip, second, got, want, decoder

    first, skip, second, got, want, decoder = asyncio.run(main())
    assert first.num_blocks == 4 and skip == 4
    assert (second.first_block, second.num_blocks) == (4, 1)
    assert got == want
    assert all_free(decoder)


def test_unusable_blocks_are_discarded_and_the_prompt_computed_locally():
    prompt = tuple(range(3, 3 + 40))

    async def main():
        decoder, interleaved = make_engine(), make_engine()
        await decoder.start()
        await interleaved.start()
        wrong_shape = KVBlocks(16, 0, torch.zeros(1, 2, 2, 2, 16, 16), None)
        past_prompt = KVBlocks(16, 2, torch.zeros(2, 2, 2, 1, 16, 16), None)
        got = [
            await tokens_of(decoder, prompt, bad, max_tokens=5, ignore_eos=True) for bad in (wrong_shape, past_prompt)
        ]
        want = await tokens_of(interleaved, prompt, max_tokens=5, ignore_eos=True)
        free = all_free(decoder)
        await decoder.stop()
        await interleaved.stop()
        return got, want, free

    got, want, free = asyncio.run(main())
    assert got == [want, want]
    assert free


def test_aborted_request_releases_imported_blocks():
    prompt = tuple(range(3, 3 + 60))

    async def main():
        prefill, decoder = make_engine(), make_engine()
        await prefill.start()
        await decoder.start()
        moved = over_the_wire(await prefill.prefill_export(prompt))
        stream = decoder.generate(
            GenerateRequest("r", prompt, SamplingParams(max_tokens=200, ignore_eos=True)), incoming_kv=moved
        )
        await stream.__anext__()
        await stream.aclose()  # the caller goes away mid-stream
        for _ in range(100):
            if all_free(decoder):
                break
            await asyncio.sleep(0.02)
        free = all_free(decoder)
        await prefill.stop()
        await decoder.stop()
        return free

    assert asyncio.run(main())


def test_the_decoder_attends_to_the_imported_blocks():
    """Blocks of noise in place of the real ones change the output: the import is really used."""
    prompt = tuple(range(3, 3 + 50))

    async def main():
        prefill, decoder = make_engine(), make_engine()
        await prefill.start()
        await decoder.start()
        real = await prefill.prefill_export(prompt)
        noise = KVBlocks(16, 0, torch.randn(real.kv.shape, generator=torch.Generator().manual_seed(1)) * 5, None)
        got = await tokens_of(decoder, prompt, noise, max_tokens=8, ignore_eos=True)
        await prefill.stop()
        await decoder.stop()
        fresh = make_engine()
        await fresh.start()
        want = await tokens_of(fresh, prompt, over_the_wire(real), max_tokens=8, ignore_eos=True)
        await fresh.stop()
        return got, want

    got, want = asyncio.run(main())
    assert got != want

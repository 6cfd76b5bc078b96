"""The default model (SmolLM2-135M-Instruct GGUF) in float32: tenor's greedy tokens equal HF
transformers' on the same file, for completions and chat, alone and batched together."""

import asyncio

import pytest
import torch
import transformers

from tenor import registry
from tenor.checkpoints.default_model import default_gguf_path
from tenor.checkpoints.gguf import load_gguf
from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.factory import EngineOptions
from tenor.engine.llm_engine import LLMEngine
from tenor.hardware import fbgemm_fp16_available
from tenor.models import native
from tenor.models.model import build_model

NEW_TOKENS = 32
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "List three colors:",
]
CHATS = ["What is the tallest mountain in the world?", "Write a haiku about autumn leaves."]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hf_pair():
    path = default_gguf_path()
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return tok, model.eval()


@pytest.fixture(scope="module")
def prompt_ids(hf_pair):
    tok, _ = hf_pair
    ids = [tok(p).input_ids for p in PROMPTS]
    for question in CHATS:
        ids.append(
            tok.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
    return ids


def hf_greedy(model, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(ids) :].tolist()


async def tenor_greedy(prompts: list[list[int]], together: bool, quantize: str = "none") -> list[list[int]]:
    servable = registry.get("llama.SmolLM2_135M_Instruct").with_overrides(dtype="float32", quantize=quantize)
    engine = LLMEngine(servable, None, EngineOptions(warmup=False, kv_cache_bytes=256 << 20))
    await engine.start()

    async def one(i: int, ids: list[int]) -> list[int]:
        sampling = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
        return [
            t
            async for o in engine.generate(GenerateRequest(f"p{i}", tuple(ids), sampling))
            for d in o.deltas
            for t in d.token_ids
        ]

    try:
        if together:
            return list(await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts))))
        return [await one(i, ids) for i, ids in enumerate(prompts)]
    finally:
        await engine.stop()


def test_tokenizer_matches_hf(hf_pair, prompt_ids):
    from tenor.tokenizer import load_tokenizer

    tok = load_tokenizer(default_gguf_path())
    assert [tok.encode(p) for p in PROMPTS] == prompt_ids[: len(PROMPTS)]


def test_greedy_tokens_match_hf_alone_and_batched(hf_pair, prompt_ids):
    _, model = hf_pair
    expected = [hf_greedy(model, ids) for ids in prompt_ids]
    alone = asyncio.run(tenor_greedy(prompt_ids, together=False))
    together = asyncio.run(tenor_greedy(prompt_ids, together=True))
    for i, ids in enumerate(prompt_ids):
        assert alone[i] == expected[i], f"prompt {i} differs from HF"
    assert together == alone


@pytest.mark.skipif(not fbgemm_fp16_available(), reason="FBGEMM's fp16 GEMM needs an x86 build of torch")
@pytest.mark.parametrize("quantize", ["fp16", "int8"])
def test_low_bit_weights_keep_greedy_tokens(hf_pair, prompt_ids, quantize):
    """The defaults of CPUs without native bf16 (float32 activations; int8 decode weights with
    tenor's kernels, fp16 without them): a near-tie may flip one prompt's continuation on some
    CPU, never most of them."""
    if quantize == "int8" and not native.available():
        pytest.skip("int8 weights need tenor's native kernels (a C compiler)")
    _, model = hf_pair
    expected = [hf_greedy(model, ids) for ids in prompt_ids]
    got = asyncio.run(tenor_greedy(prompt_ids, together=True, quantize=quantize))
    identical = sum(g == e for g, e in zip(got, expected))
    assert identical >= len(prompt_ids) - 1, f"only {identical} of {len(prompt_ids)} prompts match HF float32"


@pytest.mark.skipif(not native.available(), reason="the integer kernels need tenor's native kernels (a C compiler)")
def test_the_gguf_blocks_as_read_serve_as_their_floats(prompt_ids):
    """The int8 defaults build the model from its GGUF's blocks as read: the embedding's rows
    are looked up from its Q8_0 blocks, the very values of its float table, and the tied LM head
    reads the same blocks, its logits those of the floats' re-derived blocks to float32's rounding."""
    path = default_gguf_path()
    kept, floats = load_gguf(path, keep_blocks=True), load_gguf(path)
    from_blocks = build_model(kept.config, {**kept.weights, **kept.blocks}, torch.float32, "int8a8")
    from_floats = build_model(floats.config, floats.weights, torch.float32, "int8a8")
    assert from_blocks.embed_blocks is not None and from_blocks.embed.numel() == 0
    assert from_blocks.embed_blocks.levels is from_blocks.lm_head.kernel.q  # one copy of the levels
    ids = torch.tensor(prompt_ids[-1])
    assert torch.equal(from_blocks.embed_tokens(ids), from_floats.embed_tokens(ids))
    for rows in (1, len(ids)):  # the decode kernel and the big batches' GEMM
        h = from_floats.embed_tokens(ids[:rows])
        expected = from_floats.lm_head(h)
        assert (from_blocks.lm_head(h) - expected).abs().max() <= 1e-5 * expected.abs().max(), rows

"""The HF baseline server on a tiny random Llama and a byte-level tokenizer (no downloads)."""

import json
import time

import httpx
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from benchmarks.hf_server import MAX_NEW_TOKENS, Baseline, build_app
from tenor.bench.serving import ServingBenchConfig, run_benchmark
from tests.bench.live import serve_app


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<eos>"] = len(vocab)  # id 256: outside the model's vocabulary, so generation never stops early
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>")
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    return tok


def _tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=MAX_NEW_TOKENS + 512,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return Baseline(_tiny_model(), _tokenizer(), "tiny")


@pytest.fixture(scope="module")
def url(baseline):
    with serve_app(build_app(baseline)) as base:
        yield base


def _events(response: httpx.Response) -> list[dict]:
    datas = [line[5:].strip() for line in response.iter_lines() if line.startswith("data:")]
    assert datas[-1] == "[DONE]"
    return [json.loads(d) for d in datas[:-1]]


def test_streamed_completion_matches_the_whole_one_and_reports_usage(url):
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}
    whole = httpx.post(url + "/v1/completions", json=body, timeout=30).json()
    assert whole["usage"]["completion_tokens"] == 12 and whole["choices"][0]["finish_reason"] == "length"
    stream_body = body | {"stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=stream_body, timeout=30) as response:
        events = _events(response)
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert text == whole["choices"][0]["text"]  # greedy: the same tokens either way
    assert events[-1]["usage"] == whole["usage"] and events[-1]["choices"] == []
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_chat_stream_opens_with_the_assistant_role(url):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
        events = _events(response)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("usage" not in e for e in events)  # include_usage was not asked for


@pytest.mark.parametrize(
    "path, body, status, words",
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"max_tokens": 3}, 400, "prompt"),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        ("/v1/completions", {"prompt": "x", "model": "other"}, 404, "not served here"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(url, path, body, status, words):
    response = httpx.post(url + path, json=body, timeout=30)
    assert response.status_code == status
    assert words in response.json()["error"]["message"]
    assert httpx.get(url + "/v1/models", timeout=5).json()["data"][0]["id"] == "tiny"


def test_a_client_that_leaves_stops_its_generation(url, baseline):
    steps = []
    hook = baseline.model.register_forward_hook(lambda *args: steps.append(1))
    try:
        body = {"prompt": "go", "max_tokens": MAX_NEW_TOKENS, "temperature": 0, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as response:
            next(response.iter_lines())
        deadline = time.monotonic() + 20
        while (baseline.lock.locked() or not steps) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not baseline.lock.locked()
        assert len(steps) < MAX_NEW_TOKENS  # stopped early, not run to the end
    finally:
        hook.remove()


def test_the_benchmark_runs_against_the_baseline(url):
    config = ServingBenchConfig(base_url=url, num_prompts=3, concurrency=2, max_tokens=5, progress=False)
    s = run_benchmark(config).summary
    assert (s.completed, s.failed) == (3, 0)
    assert s.total_output_tokens == 15 and s.token_source == "usage"
    assert s.ttft.count == 3


def test_ignore_eos_makes_max_tokens_even_when_the_model_would_stop():
    # Here the model can emit the EOS (id 0), and does at once: every logit is 0, greedy picks id 0.
    tok = _tokenizer()
    tok.eos_token = tok.convert_ids_to_tokens(0)
    model = _tiny_model()
    torch.nn.init.zeros_(model.lm_head.weight)
    with serve_app(build_app(Baseline(model, tok, "tiny-eos"))) as base:
        body = {"prompt": "hi", "max_tokens": 6, "temperature": 0}
        stops = httpx.post(base + "/v1/completions", json=body, timeout=30).json()
        forced = httpx.post(base + "/v1/completions", json=body | {"ignore_eos": True}, timeout=30).json()
    assert stops["usage"]["completion_tokens"] == 1 and stops["choices"][0]["finish_reason"] == "stop"
    assert forced["usage"]["completion_tokens"] == 6 and forced["choices"][0]["finish_reason"] == "length"

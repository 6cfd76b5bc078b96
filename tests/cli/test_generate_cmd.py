"""`tenor generate` as a user runs it: a real process, real (tiny random) weights."""

import json
import subprocess
import sys

import pytest
import torch


def tenor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tenor.cli.main", *args], capture_output=True, text=True, timeout=120)


def test_json_samples_with_scores():
    out = tenor(
        "generate",
        "--model",
        "test.TinyLlamaRandom",
        "--max-tokens",
        "5",
        "--num-samples",
        "2",
        "--temperature",
        "0.9",
        "--seed",
        "3",
        "--json",
        "hello",
    )
    assert out.returncode == 0, out.stderr
    samples = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(samples) == 2
    for sample in samples:
        assert len(sample["token_ids"]) == 5 and sample["score"] < 0 and isinstance(sample["text"], str)
    assert samples[0]["score"] >= samples[1]["score"]  # best first
    again = tenor(
        "generate",
        "--model",
        "test.TinyLlamaRandom",
        "--max-tokens",
        "5",
        "--num-samples",
        "2",
        "--temperature",
        "0.9",
        "--seed",
        "3",
        "--json",
        "hello",
    )
    assert again.stdout == out.stdout  # seeded: reproducible across processes


def test_tokenized_model_takes_and_returns_ids():
    out = tenor("generate", "--model", "test.LmSpmdRandom", "--max-tokens", "4", "--json", "21,22,23")
    assert out.returncode == 0, out.stderr
    sample = json.loads(out.stdout)
    assert sample["text"] == ",".join(map(str, sample["token_ids"]))


def test_a_tokenized_model_that_accepts_text_answers_text_in_text():
    out = tenor(
        "generate", "--model", "test.LmSpmdRandom", "--max-tokens", "4", "--json", "Who is Harry Potter's mother?"
    )
    assert out.returncode == 0, out.stderr
    sample = json.loads(out.stdout)
    assert len(sample["token_ids"]) == 4
    # Random weights over UTF-8 bytes: the text is whatever those bytes decode to, not the ids.
    assert sample["text"] != ",".join(map(str, sample["token_ids"]))


def test_bad_input_is_one_line():
    for args in (
        ["--model", "no.SuchModel", "hi"],
        ["--model", "/no/such/dir", "hi"],
        ["--model", "test.TinyLlamaRandom", "--max-tokens", "0", "hi"],
        ["--model", "test.TinyLlamaRandom", "--temperature", "-1", "hi"],
        ["--model", "test.LmSpmdRandom", "1,2,99999"],
    ):
        out = tenor("generate", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("tenor: error: ") and out.stderr.count("\n") == 1, out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_device_cuda_without_a_gpu_is_a_one_line_error():
    out = tenor("generate", "--model", "test.TinyLlamaRandom", "--device", "cuda", "hi")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("tenor: error: --device cuda: torch sees no CUDA device"), out.stderr
    assert out.stderr.count("\n") == 1, out.stderr


def test_device_cpu_is_what_auto_picks_without_a_gpu():
    out = tenor("generate", "--model", "test.TinyLlamaRandom", "--device", "cpu", "--max-tokens", "4", "--json", "hi")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["token_ids"]) == 4

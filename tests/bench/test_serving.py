import json

import httpx
import pytest

from tenor.bench.serving import ServingBenchConfig, run_benchmark
from tenor.cli.main import main as tenor_main
from tests.bench.fake_sse_server import CHUNKS, FIRST_DELAY_S


def test_a_real_run_counts_every_request_and_token(fake_server_url):
    config = ServingBenchConfig(base_url=fake_server_url, num_prompts=8, concurrency=4, progress=False, warmup=1)
    report = run_benchmark(config)
    s = report.summary
    assert report.run.model == "fake"  # found at /v1/models
    assert (s.completed, s.failed) == (8, 0)
    assert s.total_output_tokens == 8 * 2 * CHUNKS and s.token_source == "usage"
    assert s.itl.count == 8 * (CHUNKS - 1)
    assert s.ttft.p50_ms >= FIRST_DELAY_S * 1000
    assert s.e2el.max_ms < 10_000
    assert s.output_throughput == pytest.approx(s.total_output_tokens / s.duration_s)


def test_poisson_chat_run_without_usage_counts_chunks(fake_server_url):
    config = ServingBenchConfig(
        base_url=fake_server_url,
        model="fake-no-usage",
        endpoint="chat",
        num_prompts=6,
        request_rate=50.0,
        progress=False,
    )
    s = run_benchmark(config).summary
    assert s.completed == 6 and s.total_output_tokens == 6 * CHUNKS and s.token_source == "chunks"
    assert s.total_prompt_tokens is None


def test_tenor_bench_prints_the_table_writes_json_and_fails_on_errors(fake_server_url, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [
        "bench",
        "--base-url",
        fake_server_url,
        "--num-prompts",
        "3",
        "--concurrency",
        "2",
        "--max-tokens",
        "4",
        "--no-progress",
        "--json-out",
        str(out),
    ]
    assert tenor_main(argv) == 0
    table = capsys.readouterr().out
    assert "3 ok, 0 failed" in table and "TTFT" in table and "ITL" in table
    data = json.loads(out.read_text())
    assert data["summary"]["completed"] == 3 and data["summary"]["total_output_tokens"] == 3 * 2 * 4
    assert data["summary"]["output_tokens_counted_from"] == "usage"
    assert data["run"]["load"] == "closed loop, concurrency 2"

    assert tenor_main(argv[:-2] + ["--model", "fake-bad"]) == 1
    assert "3 x HTTP 400: max_tokens is too large" in capsys.readouterr().out


def test_bad_flags_are_one_line_errors(capsys):
    assert tenor_main(["bench", "--num-prompts", "0"]) == 2
    assert "--num-prompts must be at least 1" in capsys.readouterr().err
    assert tenor_main(["bench", "--base-url", "localhost:8000"]) == 2
    assert "--base-url must start with http" in capsys.readouterr().err
    assert tenor_main(["bench", "--request-rate", "-1"]) == 2
    assert "rate must be positive" in capsys.readouterr().err


def test_an_unreachable_server_is_a_one_line_error(capsys):
    assert tenor_main(["bench", "--base-url", "http://127.0.0.1:1", "--no-progress"]) == 2
    assert "cannot reach http://127.0.0.1:1/v1/models" in capsys.readouterr().err


def test_a_time_limit_cuts_off_a_hanging_server_and_says_so(fake_server_url, capsys):
    argv = [
        "bench",
        "--base-url",
        fake_server_url,
        "--model",
        "fake-hang",
        "--num-prompts",
        "4",
        "--concurrency",
        "2",
        "--max-duration",
        "0.5",
        "--no-progress",
    ]
    assert tenor_main(argv) == 0  # abandoned at the limit is not a failure
    out = capsys.readouterr().out
    assert "0 ok, 0 failed, 2 cut off and 2 not sent at the time limit" in out
    assert "time limit 0.5 s" in out


def test_each_request_gets_a_fresh_connection(fake_server_url):
    # Reused keep-alive connections raced with servers closing idle ones (llama-server).
    before = len(httpx.get(fake_server_url + "/client-ports").json())
    run_benchmark(ServingBenchConfig(base_url=fake_server_url, num_prompts=4, concurrency=1, progress=False))
    ports = httpx.get(fake_server_url + "/client-ports").json()[before:]
    assert len(ports) == 4 and len(set(ports)) == 4

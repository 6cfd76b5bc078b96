"""`tenor serve`: a real process end to end, and one-line errors for bad flags.

The process test serves `test.TinyLlamaRandom` through tenor.engine.factory, whatever
engine that builds today, so it asserts shapes, statuses and non-empty text only.
"""

import json
import re
import signal
import socket
import sys

import httpx
import pytest

from tenor import registry
from tenor.cli import serve_cmd
from tenor.cli.main import build_parser, main
from tenor.engine.options import EngineOptions
from tests.server.http.live import ServeProcess

READY = re.compile(r"^tenor: serving (\S+) at (http://127\.0\.0\.1:\d+)$")


def test_serve_answers_both_apis_and_drains_on_sigterm():
    argv = [sys.executable, "-m", "tenor.cli.main", "serve", "--model", "test.TinyLlamaRandom", "--port", "0"]
    with ServeProcess(argv) as server:
        match = READY.match(server.ready_line)
        assert match, server.ready_line
        with httpx.Client(base_url=server.url, timeout=30) as client:
            health = client.get("/healthcheck")
            assert (health.status_code, health.json()) == (200, {"response": {"is_live": True}})

            seed = {"prompt": "What are the top 5 programming languages", "max_tokens": 20}
            answer = client.post("/generate", json=seed)
            assert answer.status_code == 200
            assert isinstance(answer.json()["response"], str) and answer.json()["response"]

            chat = client.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "model": match.group(1)},
            )
            assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] >= 1

            body = {
                "prompt": "abc",
                "max_tokens": 500,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            with client.stream("POST", "/v1/completions", json=body) as response:
                events = (line[len("data: ") :] for line in response.iter_lines() if line)
                next(events)  # decoding has begun
                server.signal(signal.SIGTERM)
                rest = list(events)
        assert rest[-1] == "[DONE]"
        usage = json.loads(rest[-2])["usage"]
        assert usage["completion_tokens"] == 500  # the request in flight finished in full
        code, stdout, _ = server.wait(30)
    assert code == 0
    assert stdout == ""


def run_main(capsys, *args: str) -> tuple[int, str]:
    code = main(["serve", *args])
    err = capsys.readouterr().err
    return code, err


def assert_one_line_error(code: int, err: str, fragment: str) -> None:
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tenor: error: "), err
    assert fragment in err


def test_unknown_model_name(capsys):
    assert_one_line_error(*run_main(capsys, "--model", "llama.NoSuchModel"), "unknown model config 'llama.NoSuchModel'")


def test_missing_checkpoint_path(capsys, tmp_path):
    missing = tmp_path / "model.gguf"
    assert_one_line_error(*run_main(capsys, "--model", str(missing)), "no such file or directory")


def test_a_file_that_is_not_a_checkpoint(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    assert_one_line_error(*run_main(capsys, "--model", str(notes)), "expected a checkpoint directory or a .gguf file")


def test_a_config_with_zero_heads(capsys, tmp_path):
    from tests.checkpoints.tiny_hf import make_llama

    make_llama(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_attention_heads": 0}))
    capsys.readouterr()  # make_llama's progress bar
    code, err = run_main(capsys, "--model", str(tmp_path), "--port", "0")
    assert_one_line_error(code, err, "num_attention_heads must be a positive integer, got 0")


def test_port_in_use(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(capsys, "--model", "test.TinyLlamaRandom", "--port", str(port))
    assert_one_line_error(code, err, f"port {port} on 127.0.0.1 is already in use")


def test_grpc_port_in_use(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(capsys, "--model", "test.TinyLlamaRandom", "--port", "0", "--grpc-port", str(port))
    assert_one_line_error(code, err, f"cannot listen for gRPC on 127.0.0.1:{port}")


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--port", "70000"], "port must be between 0 and 65535"),
        (["--drain-timeout", "-1"], "drain timeout"),
        (["--kv-cache-gb", "0"], "--kv-cache-gb must be > 0"),
        (["--max-waiting", "-3"], "--max-waiting must be >= 0"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be >= 1"),
        (["--grpc-port", "70000"], "gRPC port must be between 0 and 65535"),
    ],
)
def test_bad_numbers(capsys, flags, fragment):
    assert_one_line_error(*run_main(capsys, "--model", "test.TinyLlamaRandom", *flags), fragment)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_device_cuda_without_a_gpu(capsys):
    code, err = run_main(capsys, "--model", "test.TinyLlamaRandom", "--device", "cuda")
    assert_one_line_error(code, err, "--device cuda: torch sees no CUDA device")


def test_a_registry_name_serves_its_own_config_without_a_checkpoint():
    assert serve_cmd.resolve_model("test.TinyLlamaRandom") == (registry.get("test.TinyLlamaRandom"), None)


def test_a_checkpoint_path_serves_with_the_smollm2_config(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    default = registry.get("llama.SmolLM2_135M_Instruct")
    assert serve_cmd.resolve_model(str(gguf)) == (default, str(gguf))
    assert serve_cmd.resolve_model(str(tmp_path)) == (default, str(tmp_path))


def test_flags_reach_the_engine_options():
    options = serve_cmd.engine_options(max_waiting=5, kv_cache_gb=1.5, quantize_kv_cache=True)
    assert (options.max_waiting, options.kv_cache_bytes, options.quantize_kv_cache) == (5, int(1.5 * 2**30), True)
    assert serve_cmd.engine_options(256, None, False).kv_cache_bytes is None
    assert serve_cmd.engine_options(256, None, False, max_num_batched_tokens=2048).max_num_batched_tokens == 2048
    assert serve_cmd.engine_options(256, None, False).max_num_batched_tokens == EngineOptions.max_num_batched_tokens


def test_defaults_and_the_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv(serve_cmd.API_KEY_ENV, "k")
    args = build_parser().parse_args(["serve"])
    assert (args.model, args.host, args.port) == ("llama.SmolLM2_135M_Instruct", "127.0.0.1", 8000)
    assert args.drain_timeout == 10.0
    assert args.api_key == "k"
    assert args.dtype is None and not args.quantize_kv_cache
    assert args.device == "auto"

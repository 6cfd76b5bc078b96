import sys
from pathlib import Path

import httpx
import pytest

from benchmarks.peer_servers import PeerOptions, RunningServer, ServerSpec, find_llama_server, server_specs


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def test_specs_put_the_port_and_model_in_each_command(gguf, tmp_path):
    fake_llama = tmp_path / "llama-server"
    fake_llama.write_text("#!/bin/sh\n")
    fake_llama.chmod(0o755)
    options = PeerOptions(
        gguf=gguf, threads=2, llama_slots=4, llama_server=fake_llama, tenor_args=("--seed", "1"), llama_args=("-nr",)
    )
    tenor, hf, llama = server_specs(["tenor", "hf", "llama"], options)
    assert tenor.argv[-2:] == ("--seed", "1") and llama.argv[-1] == "-nr"
    assert tenor.ready_path == "/healthcheck" and "{port}" in tenor.argv and str(gguf) in tenor.argv
    assert hf.argv[1].endswith("hf_server.py") and "--threads" in hf.argv
    assert llama.name == "llama.cpp" and llama.argv[0] == str(fake_llama)
    assert llama.argv[llama.argv.index("-np") + 1] == "4"
    assert int(llama.argv[llama.argv.index("-c") + 1]) >= 4 * 600  # room for prompt + 128 per slot


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_tenor_as_cpu_runs_through_the_proxy(gguf, isa):
    (tenor,) = server_specs(["tenor"], PeerOptions(gguf=gguf, tenor_as_cpu=isa))
    assert tenor.argv[1].endswith("cpu_proxy.py") and tenor.argv[2:5] == ("--isa", isa, "serve")
    assert "tenor.cli.main" not in tenor.argv


def test_tenor_as_an_unknown_cpu_is_a_value_error(gguf):
    with pytest.raises(ValueError, match="avx2, avx512"):
        PeerOptions(gguf=gguf, tenor_as_cpu="avx10")


def test_unknown_or_missing_servers_are_value_errors(gguf, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown server"):
        server_specs(["vllm"], PeerOptions(gguf=gguf))
    with pytest.raises(ValueError, match="no such GGUF"):
        PeerOptions(gguf=tmp_path / "missing.gguf")
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "nope"))
    monkeypatch.setattr("benchmarks.peer_servers.DEFAULT_LLAMA_SERVER", tmp_path / "nope")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_llama_server(None) is None
    with pytest.raises(ValueError, match="no llama-server"):
        server_specs(["llama"], PeerOptions(gguf=gguf))


def test_a_started_server_is_waited_for_and_stopped(tmp_path):
    spec = ServerSpec("http", (sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "{port}"), "/")
    server = RunningServer(spec, tmp_path / "http.log")
    try:
        server.wait_ready(20)
        assert httpx.get(server.base_url + "/", timeout=5).status_code == 200
    finally:
        server.stop()
    assert server.process.poll() is not None
    server.stop()  # a second stop is harmless


def test_a_server_that_dies_or_never_answers_is_reported(tmp_path):
    dies = RunningServer(
        ServerSpec("dies", (sys.executable, "-c", "print('bad flag'); raise SystemExit(3)"), "/"), tmp_path / "dies.log"
    )
    with pytest.raises(RuntimeError, match="exited with 3(.|\n)*bad flag"):
        dies.wait_ready(20)
    silent = RunningServer(
        ServerSpec("silent", (sys.executable, "-c", "import time; time.sleep(60)"), "/"), tmp_path / "silent.log"
    )
    try:
        with pytest.raises(RuntimeError, match="not ready within 0.5 s"):
            silent.wait_ready(0.5)
    finally:
        silent.stop(grace_s=5)
    assert silent.process.poll() is not None

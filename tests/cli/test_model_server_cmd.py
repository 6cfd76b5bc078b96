"""`tenor model-server serve`: bad --prefill-from addresses and a --platform this machine
lacks are one-line errors (exit 2)."""

import subprocess
import sys

import pytest
import torch


@pytest.mark.parametrize("value", ["nope", "host:", ":80", "host:99999", "host:http"])
def test_bad_prefill_address_is_a_one_line_error(value, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tenor.cli.main",
            "model-server",
            "serve",
            "--cell",
            "/tenor/x",
            "--root",
            f"file://{tmp_path}",
            "--prefill-from",
            value,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"tenor: error: bad --prefill-from address {value!r}: use HOST:PORT"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_platform_cuda_without_a_gpu_is_a_one_line_error(tmp_path):
    cmd = ["model-server", "serve", "--cell", "/tenor/x", "--root", f"file://{tmp_path}", "--platform", "cuda"]
    proc = subprocess.run([sys.executable, "-m", "tenor.cli.main", *cmd], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tenor: error: --platform cuda: torch sees no CUDA device"), lines

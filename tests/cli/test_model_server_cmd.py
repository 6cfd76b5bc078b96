"""`tenor model-server serve --prefill-from`: bad addresses are one-line errors (exit 2)."""

import subprocess
import sys

import pytest


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

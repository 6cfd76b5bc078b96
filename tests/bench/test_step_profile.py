import subprocess
import sys
from pathlib import Path

import pytest

from tenor.models import native

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not native.available(), reason="no C compiler, or TENOR_NATIVE_KERNELS=0")
def test_the_step_profile_runs_the_default_model_and_times_both_kinds_of_step():
    """It wraps the model's own calls (a linear's `decoding` flag broke it once), so a change to
    their signatures shows here rather than in the next session's profile. Its own process: the
    wrappers stay on the modules it patches."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "step_profile.py"),
            "--concurrency",
            "2",
            "--prompts",
            "2",
            "--max-tokens",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 prompts" in done.stdout and "output tok/s" in done.stdout
    assert "with prompts, ms a step" in done.stdout and "decode, ms a step" in done.stdout, done.stdout


def test_decode_vs_gemm_refuses_rows_the_decode_kernel_does_not_take():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "decode_vs_gemm.py"), "--rows", "2,9"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2 and "--rows takes rows from 1 to 8" in done.stderr, done.stderr

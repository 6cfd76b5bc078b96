"""A leader that dies (kill -9) makes its workers exit within seconds: no orphan processes."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.fakes.cell import REPO_ROOT, child_env, free_port, wait_until


def test_worker_exits_when_the_leader_is_killed(tmp_path):
    port = free_port()
    group = [
        "model-server",
        "serve",
        "--cell",
        "/tenor/x",
        "--root",
        f"file://{tmp_path}",
        "--group-size",
        "2",
        "--group-leader",
        f"127.0.0.1:{port}",
        "--group-timeout",
        "5",
    ]
    log = tmp_path / "leader.log"
    with open(log, "w") as out:
        leader = subprocess.Popen(
            [sys.executable, "-m", "tenor.cli.main", *group, "--group-rank", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=child_env(),
        )
    worker = subprocess.Popen(
        [sys.executable, "-m", "tenor.cli.main", *group, "--group-rank", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=child_env(),
    )
    try:
        wait_until(lambda: "serving on" in log.read_text() or None, 60, "the group to form")
        time.sleep(2)  # idle: heartbeats keep the worker waiting
        assert worker.poll() is None
        leader.kill()
        killed = time.monotonic()
        code = worker.wait(30)
        assert time.monotonic() - killed < 10
        assert code == 1 and "leaving the group" in worker.stderr.read()
    finally:
        for proc in (leader, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

"""Two *hosts*: the 2 ranks run in two network namespaces joined by a veth pair, each with its
own address, so the group really talks over a network and not a shared loopback. Skipped, with
the reason, where the machine refuses `ip netns` (not root, no CAP_SYS_ADMIN, no iproute2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tenor import registry
from tests.dist.group_runs import TWO_HOST_PROMPTS, greedy_tokens
from tests.fakes.cell import REPO_ROOT, child_env

LEADER_IP, WORKER_IP, PORT = "10.231.7.1", "10.231.7.2", 29517


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_hosts():
    tag = os.getpid() % 100000
    ns_a, ns_b, if_a, if_b = f"tenorA{tag}", f"tenorB{tag}", f"tva{tag}", f"tvb{tag}"
    try:
        made = ip("netns", "add", ns_a)
    except FileNotFoundError:
        pytest.skip("iproute2 (`ip`) is not installed")
    if made.returncode != 0:
        pytest.skip(f"this machine refuses network namespaces: {made.stderr.strip()}")
    try:
        steps = [
            ("netns", "add", ns_b),
            ("link", "add", if_a, "type", "veth", "peer", "name", if_b),
            ("link", "set", if_a, "netns", ns_a),
            ("link", "set", if_b, "netns", ns_b),
            ("-n", ns_a, "addr", "add", f"{LEADER_IP}/24", "dev", if_a),
            ("-n", ns_b, "addr", "add", f"{WORKER_IP}/24", "dev", if_b),
            ("-n", ns_a, "link", "set", if_a, "up"),
            ("-n", ns_b, "link", "set", if_b, "up"),
            ("-n", ns_a, "link", "set", "lo", "up"),
            ("-n", ns_b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = ip(*step)
            if done.returncode != 0:
                pytest.skip(f"this machine refuses `ip {' '.join(step)}`: {done.stderr.strip()}")
        yield (ns_a, if_a), (ns_b, if_b)
    finally:
        ip("netns", "del", ns_a)
        ip("netns", "del", ns_b)


def test_group_over_a_veth_network_equals_one_process(two_hosts):
    (ns_a, if_a), (ns_b, if_b) = two_hosts
    env = child_env()
    worker = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns_b,
            sys.executable,
            "-m",
            "tenor.dist.worker",
            "--group-size",
            "2",
            "--group-rank",
            "1",
            "--group-leader",
            f"{LEADER_IP}:{PORT}",
            "--join-timeout",
            "60",
        ],
        cwd=REPO_ROOT,
        env={**env, "GLOO_SOCKET_IFNAME": if_b},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        leader = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns_a,
                sys.executable,
                "-m",
                "tests.dist.group_runs",
                "--leader",
                f"{LEADER_IP}:{PORT}",
                "--size",
                "2",
            ],
            cwd=REPO_ROOT,
            env={**env, "GLOO_SOCKET_IFNAME": if_a},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert leader.returncode == 0, leader.stderr
        assert worker.wait(30) == 0, worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    expected, _ = greedy_tokens(registry.get("test.TinyLlamaRandom"), TWO_HOST_PROMPTS, 16)
    assert json.loads(leader.stdout.strip().splitlines()[-1]) == expected

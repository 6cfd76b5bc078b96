"""Starting a whole group on this machine (`--tensor-parallel N`): the calling process becomes
rank 0 and starts ranks 1..N-1 as child processes, each with its share of the cores.

The children watch their parent: they exit when the group's leader goes (a failed collective),
and `LocalWorkers.stop` ends them (terminate, then kill) when the leader shuts down.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from tenor.dist.spec import GroupSpec
from tenor.errors import UserError

LOCAL_HOST = "127.0.0.1"
JOIN_TIMEOUT_S = 120.0  # the workers start Python and import torch before they join


def threads_per_rank(size: int, cores: int | None = None) -> int:
    """The cores split between the ranks, at least one each (not oversubscribed when N <= cores)."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // size)


@dataclass
class LocalWorkers:
    processes: list[subprocess.Popen]

    def stop(self, grace_s: float = 5.0) -> None:
        deadline = time.monotonic() + grace_s
        for proc in self.processes:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_local_group(
    size: int, port: int, timeout_s: float = 10.0, device: str = "cpu", host: str = LOCAL_HOST
) -> tuple[GroupSpec, LocalWorkers, int]:
    """Rank 0's spec, the started workers and the threads each rank should use; `port` is where
    rank 0's store listens already."""
    threads = threads_per_rank(size)
    spec = GroupSpec(size, 0, host, port, timeout_s=timeout_s, join_timeout_s=JOIN_TIMEOUT_S, device=device)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    procs = []
    for rank in range(1, size):
        cmd = [
            sys.executable,
            "-m",
            "tenor.dist.worker",
            "--group-size",
            str(size),
            "--group-rank",
            str(rank),
            "--group-leader",
            f"{host}:{port}",
            "--group-timeout",
            str(timeout_s),
            "--join-timeout",
            str(JOIN_TIMEOUT_S),
            "--threads",
            str(threads),
            "--device",
            device,
            "--exit-with-parent",
        ]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
    return spec, LocalWorkers(procs), threads


@dataclass
class LocalGroup:
    leader: object  # tenor.dist.leader.GroupLeader, or None for one process
    workers: LocalWorkers


@contextlib.contextmanager
def local_group(servable, size: int, device: str = "cpu"):
    """With size > 1: ranks 1..size-1 started here, this process rank 0, its GroupLeader formed
    (leader None for one process). The workers are stopped on the way out, whatever happened."""
    if size == 1:
        yield LocalGroup(None, LocalWorkers([]))
        return
    import torch

    from tenor.dist.shard_plan import check_group_size

    try:
        check_group_size(servable.model, size)
    except ValueError as exc:
        raise UserError(f"{servable.name}: {exc}") from None
    from tenor.dist.group import leader_store
    from tenor.dist.leader import GroupLeader

    store = leader_store(LOCAL_HOST, JOIN_TIMEOUT_S)
    spec, workers, threads = start_local_group(size, store.port, device=device, host=LOCAL_HOST)
    # The engine thread keeps this rank's share of the cores too, while the group lives; after,
    # the process gets back what it had (a test run or an embedding caller goes on with it).
    saved_env, saved_threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    leader = None
    try:
        leader = GroupLeader(spec, store)
        yield LocalGroup(leader, workers)
    finally:
        if leader is not None:
            leader.stop()
        workers.stop()
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved_env
        torch.set_num_threads(saved_threads)

"""A model-server group's process group on torch.distributed: who is who, how they meet,
and the three collectives tensor parallelism needs (broadcast, all-reduce, gather).

Device, backend and timeouts come from here only: gloo on CPU, NCCL when the device is CUDA.
Every collective carries the group's timeout, so a dead or hung peer surfaces as an error
within seconds instead of a hang.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from tenor.dist.spec import GroupSpec
from tenor.errors import UserError


def leader_store(host: str, join_timeout_s: float) -> dist.TCPStore:
    """Rank 0's rendezvous store on a port of the system's choosing (its `port` says which), for
    a leader that starts its own workers: the port is bound before any worker is told it, so
    nothing else can take it in between."""
    return dist.TCPStore(
        host, 0, is_master=True, timeout=datetime.timedelta(seconds=join_timeout_s), wait_for_workers=False
    )


class Group:
    """The joined process group. One thread drives it (collectives run in the same order on every rank)."""

    def __init__(self, spec: GroupSpec, store: dist.TCPStore | None = None) -> None:
        """`store`: the leader's store, where rank 0 opened it already (see `leader_store`)."""
        self.spec = spec
        self.rank, self.size = spec.rank, spec.size
        self.device = torch.device(spec.device)
        self.collective_s = 0.0  # time spent in all-reduce and gather (benchmarks read it)
        self.collective_calls = 0
        if spec.device == "cuda":
            torch.cuda.set_device(spec.rank % torch.cuda.device_count())
        join_timeout = datetime.timedelta(seconds=spec.join_timeout_s)
        if store is None:
            try:
                # Our own store first: each rank claims its index, so two processes given the
                # same rank are told so at once instead of corrupting the rendezvous.
                store = dist.TCPStore(
                    spec.leader_host,
                    spec.leader_port,
                    is_master=spec.is_leader,
                    timeout=join_timeout,
                    wait_for_workers=False,
                )
            except Exception as exc:
                raise GroupError(_join_error(spec, exc)) from None
        if store.add(f"tenor/rank/{spec.rank}", 1) != 1:
            raise GroupError(
                f"rank {spec.rank} is already taken in the group at {spec.leader_host}:{spec.leader_port} "
                "(two processes were given the same rank)"
            )
        self._store = store
        try:
            dist.init_process_group(
                backend=spec.backend,
                store=dist.PrefixStore("tenor/pg", store),
                rank=spec.rank,
                world_size=spec.size,
                timeout=join_timeout,
            )
            # Steps run on a second group with the short timeout; the default one keeps the long
            # timeout for barriers around loading.
            self.pg = dist.new_group(list(range(spec.size)), timeout=datetime.timedelta(seconds=spec.timeout_s))
        except Exception as exc:  # torch raises several kinds (DistStoreError, RuntimeError, ValueError)
            raise GroupError(_join_error(spec, exc)) from None

    def _on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # NCCL moves only device tensors; gloo takes CPU ones as they are.
        return tensor if tensor.device == self.device else tensor.to(self.device)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        moved = self._on_device(tensor)
        dist.broadcast(moved, src=0, group=self.pg)
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        moved = self._on_device(tensor)
        dist.all_reduce(moved, group=self.pg)
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def gather_to_leader(self, tensor: torch.Tensor) -> list[torch.Tensor] | None:
        moved = self._on_device(tensor.contiguous())
        parts = [torch.empty_like(moved) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(moved, parts, dst=0, group=self.pg)
        return None if parts is None else [p.to(tensor.device) for p in parts]

    def wait_all(self, what: str) -> None:
        """Every rank reached this point (e.g. finished loading), within the join timeout."""
        try:
            if self.spec.backend == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=self.spec.join_timeout_s))
            else:
                dist.barrier()
        except Exception as exc:
            raise GroupError(f"group of {self.size}: not every rank finished {what} ({_first_line(exc)})") from None

    def close(self) -> None:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a broken group may fail to tear down; the process is ending anyway
                pass


class GroupError(UserError):
    """The group could not form, or a peer died or hung."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _join_error(spec: GroupSpec, exc: Exception) -> str:
    first = _first_line(exc)
    return (
        f"rank {spec.rank} could not join the group of {spec.size} at {spec.leader_host}:{spec.leader_port} "
        f"within {spec.join_timeout_s:g}s ({first})"
    )

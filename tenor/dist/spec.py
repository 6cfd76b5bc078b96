"""Where a rank sits in a model-server group: plain values, parsed from flags or from
LeaderWorkerSet's environment (no torch here: the CLI and servers import it cheaply)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"
DEFAULT_GROUP_PORT = 29500


@dataclass(frozen=True)
class GroupSpec:
    """One rank's place in a group: its size, its rank (0 = leader) and where the leader listens."""

    size: int
    rank: int
    leader_host: str
    leader_port: int
    timeout_s: float = 10.0  # any collective: a dead or hung peer is noticed within this
    join_timeout_s: float = 300.0  # forming the group and loading weights (ranks start at different times)
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"group size must be >= 1, got {self.size}")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"group rank {self.rank} is out of range for a group of {self.size} (0..{self.size - 1})")
        if not 0 < self.leader_port < 65536:
            raise ValueError(f"group leader port must be in 1..65535, got {self.leader_port}")
        if self.timeout_s <= 0 or self.join_timeout_s <= 0:
            raise ValueError(f"group timeouts must be > 0 seconds, got {self.timeout_s} and {self.join_timeout_s}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"group device must be 'cpu' or 'cuda', got {self.device!r}")

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def is_leader(self) -> bool:
        return self.rank == 0


def parse_leader(address: str) -> tuple[str, int]:
    """HOST:PORT (or a bare HOST, as LeaderWorkerSet gives it) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = address, str(DEFAULT_GROUP_PORT)
    if not host or not port.isdigit():
        raise ValueError(f"group leader must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def spec_from_env(
    size: int | None, rank: int | None, leader: str | None, env: Mapping[str, str] | None = None, **extra
) -> GroupSpec | None:
    """Flags first, LeaderWorkerSet's environment when a flag is absent; None when no group is asked for."""
    env = os.environ if env is None else env
    if size is None and env.get(LWS_GROUP_SIZE):
        size = _env_int(env, LWS_GROUP_SIZE)
    if rank is None and env.get(LWS_WORKER_INDEX):
        rank = _env_int(env, LWS_WORKER_INDEX)
    leader = leader or env.get(LWS_LEADER_ADDRESS)
    if size is None or size == 1:
        return None
    if rank is None or leader is None:
        raise ValueError(
            f"a group of {size} needs --group-rank and --group-leader (or {LWS_WORKER_INDEX} and {LWS_LEADER_ADDRESS})"
        )
    host, port = parse_leader(leader)
    return GroupSpec(size, rank, host, port, **extra)


def _env_int(env, name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {env[name]!r}") from None

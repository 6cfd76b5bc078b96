"""The assigner: a pure planner that decides which model server holds which replica.

No I/O: the manager hands it what it believes (servers with capacity and the models they
hold, published models with their replica counts and memory needs) and gets back a Plan
of loads and unloads. Rules, in SAX's experimental assigner's spirit but stricter:

- A replica that is LOADING or LOADED stays where it is; healthy replicas are never moved
  to rebalance, so a replica-count change reloads nothing that serves.
- Too many replicas: remove those on servers that missed a heartbeat first, then
  not-yet-serving (LOADING) ones, then those on the fullest servers.
- Too few: biggest models first; each replica goes to the eligible server with the most
  free memory (spreading load), where eligible means it can serve the config, has every
  constraint tag (its platform counts as a tag), has room, and the model has not failed
  there in this generation.
- Models that are no longer published are unloaded wherever they are.
- Roles (disaggregated serving): a model may ask for P prefill and D decode replicas
  instead of interleaved ("both") ones. Each role is counted, trimmed and placed as above,
  on distinct servers; a replica held in a role the model no longer asks for (its mode
  changed) is unloaded, and the new role is placed once that server is free. A server
  tagged `prefill` takes no decode replica and one tagged `decode` no prefill replica;
  servers tagged with the role are preferred (so prefill and decode pools can be sized
  apart, as in deploy/k8s/disaggregated.yaml).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

from tenor.admin.roles import BOTH, DECODE, PREFILL

_OTHER_ROLE = {PREFILL: DECODE, DECODE: PREFILL}


class ReplicaStatus(str, enum.Enum):
    LOADING = "LOADING"
    LOADED = "LOADED"
    FAILED = "FAILED"
    UNLOADING = "UNLOADING"


# Statuses that take memory on a server. A FAILED load holds nothing.
_OCCUPYING = (ReplicaStatus.LOADING, ReplicaStatus.LOADED, ReplicaStatus.UNLOADING)
_HOLDING = (ReplicaStatus.LOADING, ReplicaStatus.LOADED)


@dataclass(frozen=True)
class ServerView:
    address: str
    memory_bytes: int
    platform: str = "cpu"
    tags: frozenset[str] = frozenset()
    servable_configs: frozenset[str] = frozenset()  # empty: every config
    models: tuple[tuple[str, ReplicaStatus], ...] = ()  # (model name, status), as the admin believes
    draining: bool = False  # missed its last heartbeat: keeps what it has, gets nothing new, gives up first
    group_size: int = 1  # ranks of its model-server group (one process: 1)
    roles: tuple[tuple[str, str], ...] = ()  # (model name, role) where not "both"

    def status_of(self, model: str) -> ReplicaStatus | None:
        return next((s for name, s in self.models if name == model), None)

    def role_of(self, model: str) -> str:
        return next((r for name, r in self.roles if name == model), BOTH)

    def can_serve(self, config_name: str, constraints: frozenset[str], group_sizes: tuple[int, ...] = (1,)) -> bool:
        configs_ok = not self.servable_configs or config_name in self.servable_configs
        return configs_ok and constraints <= (self.tags | {self.platform}) and self.group_size in group_sizes


@dataclass(frozen=True)
class ModelDemand:
    name: str
    config_name: str
    replicas: int
    memory_bytes: int
    constraints: frozenset[str] = frozenset()
    failed_on: frozenset[str] = frozenset()  # servers where this generation failed to load
    gave_up: bool = False  # load attempts exhausted: place nothing new
    group_sizes: tuple[int, ...] = (1,)  # model-server group sizes that may hold a replica
    roles: tuple[tuple[str, int], ...] = ()  # ((role, count), ...) summing to replicas; (): all "both"

    def wanted(self) -> tuple[tuple[str, int], ...]:
        return self.roles or ((BOTH, self.replicas),)


@dataclass(frozen=True, order=True)
class Action:
    model: str
    server: str
    role: str = BOTH  # what a load asks the server to run the replica as


@dataclass(frozen=True, order=True)
class Shortfall:
    model: str
    missing: int
    reason: str


@dataclass(frozen=True)
class Plan:
    loads: tuple[Action, ...] = ()
    unloads: tuple[Action, ...] = ()
    shortfalls: tuple[Shortfall, ...] = ()

    def render(self) -> str:
        """Sorted text, one action per line: what tests compare."""
        lines = [f"load {a.model} on {a.server}" + (f" as {a.role}" if a.role != BOTH else "") for a in self.loads]
        lines += [f"unload {a.model} from {a.server}" for a in self.unloads]
        lines += [f"short {s.model} by {s.missing}: {s.reason}" for s in self.shortfalls]
        return "\n".join(sorted(lines))


@dataclass
class _Room:
    """Free memory per server while the plan is built."""

    free: dict[str, int] = field(default_factory=dict)


def _initial_room(servers: Sequence[ServerView], needs: dict[str, int]) -> _Room:
    room = _Room()
    for server in servers:
        used = sum(needs.get(name, 0) for name, status in server.models if status in _OCCUPYING)
        room.free[server.address] = server.memory_bytes - used
    return room


def _shortfall_reason(
    model: ModelDemand, servers: Sequence[ServerView], room: _Room, taken: set[str], role: str = BOTH
) -> str:
    if not servers:
        return "no model server has joined the cell"
    serving = [
        s for s in servers if s.can_serve(model.config_name, model.constraints, model.group_sizes) and not s.draining
    ]
    if not serving:
        tags = ",".join(sorted(model.constraints))
        groups = "" if model.group_sizes == (1,) else f" as a group of {' or '.join(str(n) for n in model.group_sizes)}"
        return f"no server offers {model.config_name}" + (f" with tags {tags}" if tags else "") + groups
    others = [s for s in serving if s.address not in taken]
    if not others:
        return f"all {len(serving)} eligible server(s) already hold a replica"
    other_role = _OTHER_ROLE.get(role)
    if other_role is not None and all(other_role in s.tags for s in others):
        return f"the {len(others)} other eligible server(s) are tagged {other_role}"
    not_failed = [s for s in others if s.address not in model.failed_on]
    if not not_failed:
        return "failed to load on every other eligible server"
    biggest = max(room.free[s.address] for s in not_failed)
    return f"needs {model.memory_bytes} bytes per replica; most free on an eligible server is {max(biggest, 0)}"


def _trim(model: ModelDemand, holders: list[ServerView], keep: int, room: _Room) -> list[Action]:
    excess = len(holders) - keep
    if excess <= 0:
        return []
    # Not-yet-serving replicas go first, then those on the fullest servers.
    order = sorted(
        holders,
        key=lambda s: (
            not s.draining,
            s.status_of(model.name) == ReplicaStatus.LOADED,
            room.free[s.address],
            s.address,
        ),
    )
    return [Action(model.name, s.address) for s in order[:excess]]


def _place(
    model: ModelDemand,
    servers: Sequence[ServerView],
    missing: int,
    room: _Room,
    role: str = BOTH,
    exclude: frozenset[str] = frozenset(),
) -> tuple[list[Action], Shortfall | None]:
    """Places `missing` replicas in `role`, never on `exclude` (servers given another role of it)."""
    loads: list[Action] = []
    for _ in range(missing):
        candidates = [
            s
            for s in servers
            if s.status_of(model.name) in (None, ReplicaStatus.FAILED)
            and not s.draining
            and s.address not in model.failed_on
            and s.can_serve(model.config_name, model.constraints, model.group_sizes)
            and room.free[s.address] >= model.memory_bytes
            and s.address not in exclude
            and _OTHER_ROLE.get(role) not in s.tags
            and all(a.server != s.address for a in loads)
        ]
        if not candidates:
            taken = (
                {s.address for s in servers if s.status_of(model.name) in _HOLDING}
                | {a.server for a in loads}
                | exclude
            )
            short = missing - len(loads)
            reason = _shortfall_reason(model, servers, room, taken, role)
            return loads, Shortfall(model.name, short, reason if role == BOTH else f"{role} replicas: {reason}")
        best = min(
            candidates,
            key=lambda s: (role != BOTH and role not in s.tags, -room.free[s.address], len(s.models), s.address),
        )
        room.free[best.address] -= model.memory_bytes
        loads.append(Action(model.name, best.address, role))
    return loads, None


def assign(servers: Sequence[ServerView], models: Sequence[ModelDemand]) -> Plan:
    """Plans loads and unloads that move the cell towards every model's replica count."""
    needs = {m.name: m.memory_bytes for m in models}
    room = _initial_room(servers, needs)
    loads: list[Action] = []
    unloads: list[Action] = []
    shortfalls: list[Shortfall] = []
    for server in servers:
        for name, status in server.models:
            if name not in needs and status != ReplicaStatus.UNLOADING:
                unloads.append(Action(name, server.address))
    for model in sorted(models, key=lambda m: (-m.memory_bytes, m.name)):
        holders = [s for s in servers if s.status_of(model.name) in _HOLDING]
        wanted = dict(model.wanted())
        unloads += [Action(model.name, s.address) for s in holders if s.role_of(model.name) not in wanted]
        placed_here: set[str] = set()
        short_by = 0
        for role, count in model.wanted():
            in_role = [s for s in holders if s.role_of(model.name) == role]
            unloads += _trim(model, in_role, count, room)
            missing = count - len(in_role)
            if missing <= 0:
                continue
            if model.gave_up:
                short_by += missing
                continue
            placed, short = _place(model, servers, missing, room, role, frozenset(placed_here))
            placed_here.update(a.server for a in placed)
            loads += placed
            if short is not None:
                shortfalls.append(short)
        if short_by:
            shortfalls.append(Shortfall(model.name, short_by, "gave up after repeated load failures"))
    return Plan(tuple(sorted(loads)), tuple(sorted(unloads)), tuple(sorted(shortfalls)))

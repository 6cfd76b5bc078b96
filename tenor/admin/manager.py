"""The active admin's state: published models (durable), joined servers (polled), and the
loop that keeps the cell moving towards what is published.

Every mutation is written to the root before it is applied in memory or acknowledged.
The loop polls each server's GetStatus every `poll_interval_s` (the heartbeat), drops a
server that has not answered for `prune_after_s`, runs the assigner and starts the
planned Modelet actions. Runs in one asyncio loop: no locks beyond the mutation lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from tenor.admin.address_book import AddressBook, AddressSet
from tenor.admin.assigner import ModelDemand, ReplicaStatus, assign
from tenor.admin.model_specs import Placement, model_server_overrides, validate_spec
from tenor.admin.naming import CellName
from tenor.admin.roles import BOTH, PREFILL, SERVING_ROLES, role_counts
from tenor.admin.servers import ActionResult, ModelServer, ServerSpecView
from tenor.admin.store import CellState, CellStore, Leadership, LostLeadership, ModelSpec, StoreError
from tenor.errors import UserError
from tenor.proto import modelet_pb2

log = logging.getLogger(__name__)


class NotFoundError(UserError):
    pass


class AlreadyExistsError(UserError):
    pass


class NotReadyError(UserError):
    """The model cannot reach the asked replica count: its loads failed."""


class NotLeaderError(Exception):
    """This admin lost the lead (or the root is unreachable); the caller should retry elsewhere."""


@dataclass(frozen=True)
class ManagerOptions:
    poll_interval_s: float = 1.0
    prune_after_s: float = 10.0  # a loading server can be quiet for seconds; a dead one stays quiet
    rpc_timeout_s: float = 1.0  # GetStatus deadline
    load_timeout_s: float = 900.0
    max_load_attempts: int = 3  # failed loads per model per publish/update before giving up
    startup_grace_s: float = 2.0  # after taking over, wait this long for servers to re-join before placing

    def __post_init__(self) -> None:
        for name in ("poll_interval_s", "prune_after_s", "rpc_timeout_s", "load_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.prune_after_s < self.poll_interval_s:
            raise ValueError(
                f"prune_after_s ({self.prune_after_s}) must be >= poll_interval_s ({self.poll_interval_s})"
            )
        if self.max_load_attempts < 1:
            raise ValueError(f"max_load_attempts must be >= 1, got {self.max_load_attempts}")
        if self.startup_grace_s < 0:
            raise ValueError(f"startup_grace_s must be >= 0, got {self.startup_grace_s}")


_tokens = itertools.count(1)


@dataclass
class ModelRecord:
    spec: ModelSpec
    placement: Placement
    token: int = field(default_factory=lambda: next(_tokens))  # generation: new at each publish/update
    failures: dict[str, str] = field(default_factory=dict)  # server -> reason, this generation
    last_failure: str = ""
    shortfall: str = ""
    stale: set[str] = field(default_factory=set)  # servers whose replica needs UpdateLoaded
    roll_halted: bool = False  # a reload failed: leave the other replicas serving the old version

    def gave_up(self, max_attempts: int) -> bool:
        return len(self.failures) >= max_attempts

    def demand(self, max_attempts: int) -> ModelDemand:
        return ModelDemand(
            self.spec.name,
            self.spec.config_name,
            self.spec.replicas,
            self.placement.memory_bytes,
            self.placement.constraints,
            frozenset(self.failures),
            self.gave_up(max_attempts),
            self.placement.group_sizes,
            self.placement.roles.demand() if self.placement.roles else (),
        )

    def load_request(self, role: str = BOTH) -> modelet_pb2.LoadRequest:
        return modelet_pb2.LoadRequest(
            model_name=self.spec.name,
            config_name=self.spec.config_name,
            checkpoint=self.spec.checkpoint or "",
            overrides=model_server_overrides(self.spec.overrides_map),
            role=role,
        )


def _record_for(spec: ModelSpec, cell: CellName) -> ModelRecord:
    try:
        return ModelRecord(spec, validate_spec(spec, cell))
    except UserError as exc:
        # Stored before this binary's registry changed: keep it (it is the user's state), never place it.
        record = ModelRecord(spec, Placement(0, frozenset({"unservable"})))
        record.shortfall = f"cannot serve as stored: {exc}"
        return record


class Manager:
    def __init__(
        self,
        store: CellStore,
        leadership: Leadership,
        admin_id: str,
        state: CellState,
        options: ManagerOptions = ManagerOptions(),
        dial: Callable[[str], object] | None = None,
    ) -> None:
        self.store = store
        self._dial = dial  # how to reach a model server (token and TLS); None: plain channels
        self.cell = store.cell
        self.admin_id = admin_id
        self.options = options
        self._leadership = leadership
        self._state = state
        self._models = {spec.name: _record_for(spec, self.cell) for spec in state.models}
        self.servers: dict[str, ModelServer] = {}
        self.lost = asyncio.Event()  # set when a write finds we no longer lead
        self._book = AddressBook(settled=False)
        self._mutate = asyncio.Lock()
        self._wake = asyncio.Event()
        self._started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        for name in self._models:
            self._book.add_model(name)

    @property
    def models(self) -> dict[str, ModelRecord]:
        return self._models

    @property
    def book(self) -> AddressBook:
        return self._book

    async def start(self) -> None:
        self._started = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._book.close()
        await asyncio.gather(*(s.close() for s in self.servers.values()), return_exceptions=True)
        self.servers.clear()

    # --- durable mutations -----------------------------------------------------------------

    async def _save(self, state: CellState) -> None:
        try:
            await asyncio.to_thread(self.store.save_state, state, self._leadership)
        except LostLeadership as exc:
            self.lost.set()
            raise NotLeaderError(f"not the leader: {exc}") from None
        except StoreError as exc:
            raise NotLeaderError(f"cell root unavailable: {exc}") from None
        self._state = state

    async def publish(self, spec: ModelSpec) -> ModelSpec:
        async with self._mutate:
            if spec.name in self._models:
                raise AlreadyExistsError(f"model {spec.name} is already published; unpublish it or use update")
            placement = validate_spec(spec, self.cell)
            spec = dataclasses.replace(spec, uuid=uuid.uuid4().hex)
            await self._save(self._state.with_model(spec))
            self._models[spec.name] = ModelRecord(spec, placement)
            self._book.add_model(spec.name)
        log.info("published %s (%s, %d replicas)", spec.name, spec.config_name, spec.replicas)
        self._wake.set()
        return spec

    async def update(
        self, name: str, replicas: int | None, checkpoint: str | None, overrides: dict[str, str]
    ) -> ModelSpec:
        """checkpoint None: unchanged; "" sets None. An empty override value removes the key."""
        async with self._mutate:
            record = self._get(name)
            old = record.spec
            merged = old.overrides_map
            for key, value in overrides.items():
                if value:
                    merged[key] = value
                else:
                    merged.pop(key, None)
            new_checkpoint = old.checkpoint if checkpoint is None else (checkpoint or None)
            roles = role_counts(merged)
            if replicas is None and roles is not None:
                replicas = roles.total  # `update ... prefill_replicas=2` needs no --replicas
            spec = ModelSpec.make(
                name, old.config_name, new_checkpoint, old.replicas if replicas is None else replicas, merged, old.uuid
            )
            placement = validate_spec(spec, self.cell)
            await self._save(self._state.with_model(spec))
            reload = spec.checkpoint != old.checkpoint or model_server_overrides(
                spec.overrides_map
            ) != model_server_overrides(old.overrides_map)
            record.spec, record.placement, record.token = spec, placement, next(_tokens)
            record.failures.clear()
            record.last_failure = ""
            record.roll_halted = False
            if reload:
                record.stale = {a for a, s in self.servers.items() if name in s.replicas}
        log.info("updated %s: %d replicas, checkpoint %s", name, spec.replicas, spec.checkpoint)
        self._wake.set()
        return spec

    async def unpublish(self, name: str) -> None:
        async with self._mutate:
            self._get(name)
            await self._save(self._state.without_model(name))
            del self._models[name]
            self._book.remove_model(name)
        log.info("unpublished %s", name)
        self._wake.set()

    def _get(self, name: str) -> ModelRecord:
        record = self._models.get(name)
        if record is None:
            raise NotFoundError(f"model {name} is not published")
        return record

    # --- model servers ---------------------------------------------------------------------

    async def join(self, address: str, http_address: str, spec: ServerSpecView) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"bad model server address {address!r}: expected host:port")
        if spec.memory_bytes < 0:
            raise UserError(f"memory_bytes must be >= 0, got {spec.memory_bytes}")
        server = self.servers.get(address)
        if server is not None:
            if (server.spec, server.http_address) != (spec, http_address):
                server.spec, server.http_address = spec, http_address
                self._wake.set()
            return
        dial: dict[str, Any] = {"dial": self._dial} if self._dial is not None else {}
        server = ModelServer(
            address,
            http_address,
            spec,
            self._on_result,
            self.options.rpc_timeout_s,
            self.options.load_timeout_s,
            **dial,
        )
        self.servers[address] = server
        log.info(
            "model server %s joined (%s, %d bytes, tags %s)",
            address,
            spec.platform,
            spec.memory_bytes,
            ",".join(sorted(spec.tags)) or "-",
        )
        task = asyncio.get_running_loop().create_task(self._first_poll(server))
        self._background.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._background.discard)

    async def _first_poll(self, server: ModelServer) -> None:
        await server.poll()
        self._wake.set()

    def _on_result(self, result: ActionResult) -> None:
        record = self._models.get(result.model)
        if (
            record is not None
            and record.token == result.token
            and not result.ok
            and not result.transient
            and result.kind in ("load", "update")
        ):
            record.failures[result.server] = result.reason
            record.last_failure = f"{result.server}: {result.reason}"
            if result.kind == "update":
                record.stale.clear()
                record.roll_halted = True
            log.warning("%s failed to %s on %s: %s", result.model, result.kind, result.server, result.reason)
        self._book.poke()
        self._wake.set()

    # --- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        next_poll = 0.0
        while True:
            self._wake.clear()  # before reconciling: a wake during it runs the loop again at once
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + self.options.poll_interval_s
                await asyncio.gather(*(s.poll() for s in list(self.servers.values())))
                await self._prune()
            try:
                self._reconcile()
            except Exception:  # keep the cell running; the next tick tries again
                log.exception("reconcile failed")
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, next_poll - time.monotonic()))
            except TimeoutError:
                pass

    async def _prune(self) -> None:
        now = time.monotonic()
        dead = [s for s in self.servers.values() if now - s.last_ok > self.options.prune_after_s]
        for server in dead:
            log.warning("dropping model server %s: no heartbeat for %.1fs", server.address, now - server.last_ok)
            del self.servers[server.address]
            await server.close()

    def _reconcile(self) -> None:
        self._note_reported_state()
        past_grace = time.monotonic() - self._started >= self.options.startup_grace_s
        if past_grace:
            self._run_plan()
            self._roll_updates()
        for name in self._models:
            self._book.set(name, self.addresses_of(name, SERVING_ROLES), self.addresses_of(name, {PREFILL}))
        # Watchers wait until every server that re-joined has reported its replicas.
        if past_grace and all(s.polled or not s.healthy for s in self.servers.values()):
            self._book.settle()

    def _note_reported_state(self) -> None:
        """Acts on what servers report that the admin did not cause: failures and stale versions from
        before a failover, and a replica of a name re-published with another config."""
        for server in self.servers.values():
            for name, replica in list(server.replicas.items()):
                record = self._models.get(name)
                if record is None or name in server.pending or not replica.config_name:
                    continue
                if replica.config_name != record.spec.config_name:
                    if replica.status != ReplicaStatus.UNLOADING:
                        server.start_unload(name, record.token)
                    continue
                current = replica.checkpoint == (record.spec.checkpoint or "")
                if replica.status == ReplicaStatus.FAILED and current and server.address not in record.failures:
                    record.failures[server.address] = replica.failure_reason
                    record.last_failure = f"{server.address}: {replica.failure_reason}"
                elif replica.status == ReplicaStatus.LOADED and not current and not record.roll_halted:
                    record.stale.add(server.address)

    def _run_plan(self) -> None:
        known = [s for s in self.servers.values() if s.polled]
        demands = [r.demand(self.options.max_load_attempts) for r in self._models.values()]
        plan = assign([s.view() for s in known], demands)
        for action in plan.unloads:
            record = self._models.get(action.model)
            self.servers[action.server].start_unload(action.model, record.token if record else 0)
        for action in plan.loads:
            record = self._models[action.model]
            self.servers[action.server].start_load(record.load_request(action.role), record.token)
        short: dict[str, str] = {}
        for s in plan.shortfalls:  # one per role of a disaggregated model
            line = f"{s.missing} replica(s) short: {s.reason}"
            short[s.model] = f"{short[s.model]}; {line}" if s.model in short else line
        for name, record in self._models.items():
            if not record.shortfall.startswith("cannot serve"):
                record.shortfall = short.get(name, "")

    def _roll_updates(self) -> None:
        """Reloads stale replicas one at a time per model, so the others keep serving."""
        for name, record in self._models.items():
            record.stale = {
                a
                for a in record.stale
                if a in self.servers
                and self.servers[a].replicas.get(name)
                and self.servers[a].replicas[name].status in (ReplicaStatus.LOADING, ReplicaStatus.LOADED)
            }
            # Wait while any replica of this model is mid-action (the previous reload, a new load).
            if not record.stale or any(name in s.pending for s in self.servers.values()):
                continue
            ready = sorted(a for a in record.stale if self.servers[a].replicas[name].status == ReplicaStatus.LOADED)
            if ready:
                address = ready[0]
                record.stale.discard(address)
                request = modelet_pb2.UpdateLoadedRequest(
                    model_name=name,
                    checkpoint=record.spec.checkpoint or "",
                    overrides=model_server_overrides(record.spec.overrides_map),
                )
                self.servers[address].start_update(request, record.token)

    # --- queries -----------------------------------------------------------------------------

    def addresses_of(self, name: str, roles: Collection[str] | None = None) -> tuple[str, ...]:
        """LOADED replicas of `name` in `roles` (None: every role)."""
        return tuple(
            sorted(
                a
                for a, s in self.servers.items()
                if s.healthy
                and name not in s.pending
                and s.replicas.get(name) is not None
                and s.replicas[name].status == ReplicaStatus.LOADED
                and (roles is None or s.replicas[name].role in roles)
            )
        )

    def get(self, name: str) -> ModelRecord:
        return self._get(name)

    async def wait_for_ready(self, name: str, num_replicas: int) -> AddressSet:
        if num_replicas < 1:
            raise UserError(f"num_replicas must be >= 1, got {num_replicas}")
        self._get(name)

        def ready(current: AddressSet) -> bool:
            if len(current.addresses) + len(current.prefill) >= num_replicas:
                return True
            record = self._models.get(name)
            if record is not None and record.gave_up(self.options.max_load_attempts):
                raise NotReadyError(f"{name} cannot reach {num_replicas} replica(s): {record.last_failure}")
            return False

        return await self._book.wait_for(name, ready)

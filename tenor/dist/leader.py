"""Rank 0 of a model-server group: it runs the engine (scheduler, block manager, sampling)
and drives the workers. Each step it broadcasts the step plan and runs its own shard of the
same forward; it alone receives the gathered logits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed import TCPStore

from tenor.dist import messages
from tenor.dist.group import Group, GroupError
from tenor.dist.messages import Kind, StepInputs
from tenor.dist.shard_loading import load_shard, open_source
from tenor.dist.shard_plan import check_group_size, plan_shard
from tenor.dist.sharded_lm import ShardedLM
from tenor.dist.spec import GroupSpec
from tenor.models.config import ModelConfig
from tenor.models.layers import AttentionBatch, PagedKVCache
from tenor.models.model import parse_dtype
from tenor.registry import ServableConfig

log = logging.getLogger(__name__)


@dataclass
class RankModel:
    model: ShardedLM
    config: ModelConfig  # the whole model's
    tokenizer_path: object
    dtype: torch.dtype


def servable_to_json(servable: ServableConfig) -> dict:
    return dataclasses.asdict(servable)


def servable_from_json(data: dict) -> ServableConfig:
    return ServableConfig(
        **{**data, "model": ModelConfig.from_dict(data["model"]), "group_sizes": tuple(data.get("group_sizes", (1,)))}
    )


def load_rank_model(
    group: Group, servable: ServableConfig, checkpoint: str | None, dtype_name: str, weight_format: str
) -> RankModel:
    """This rank's shard of the model, read from its slices of the checkpoint, in the precision
    the leader chose (every rank must store its weights the same way)."""
    source = open_source(checkpoint, servable.model, servable.seed)
    shard = plan_shard(source.config, group.size, group.rank)
    dtype = parse_dtype(dtype_name)
    local, config = load_shard(source, shard, dtype, servable.max_target_length, weight_format, group.spec.device)
    return RankModel(ShardedLM(local, shard, config.vocab_size, group), config, source.tokenizer_path, dtype)


class LeaderModel(nn.Module):
    """The leader's model: broadcasts each step's inputs, then runs its shard of the forward."""

    def __init__(self, sharded: ShardedLM, leader: GroupLeader) -> None:
        super().__init__()
        self.sharded = sharded
        self.leader = leader
        self.native_kernels = sharded.native_kernels  # the runner reads it to fill AttentionBatch.native

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: PagedKVCache,
        batch: AttentionBatch,
        logits_rows: torch.Tensor,
    ) -> torch.Tensor:
        plan = messages.encode_step(StepInputs(input_ids, positions, batch, logits_rows))
        with self.leader.collectives():
            messages.send(self.leader.group, Kind.STEP, plan)
            return self.sharded(input_ids, positions, cache, batch, logits_rows)


class GroupLeader:
    """The leader's side of a formed group: loads models on every rank, keeps the workers
    alive with heartbeats while idle, and stops them.

    One lock orders everything sent: a step (plan broadcast + forward collectives) or a load
    runs whole, and the heartbeat thread speaks only between them. `broken` turns True once a
    collective failed (a worker died or hung): torch.distributed cannot re-form a group in
    place, so engines report `degraded` and the owner decides (a model server leaves the cell
    and exits; the admin re-places the replica)."""

    HEARTBEAT_S = 1.0

    def __init__(self, spec: GroupSpec, store: TCPStore | None = None) -> None:
        if not spec.is_leader:
            raise ValueError("GroupLeader runs on rank 0")
        self.spec = spec
        self.group: Group | None = Group(spec, store)  # waits for every rank (join timeout)
        self.broken = False
        self.local_kv_heads = 0
        self._lock = threading.Lock()
        self._last_sent = time.monotonic()
        self._closing = threading.Event()
        self._beat = threading.Thread(target=self._heartbeats, daemon=True, name="tenor-group-heartbeat")
        self._beat.start()

    @contextlib.contextmanager
    def collectives(self) -> Iterator[Group]:
        """Exclusive use of the group; a failure inside marks it broken and raises GroupError."""
        with self._lock:
            if self.broken or self.group is None:
                raise GroupError("the model-server group is broken: a rank is missing")
            try:
                yield self.group
            except GroupError as exc:
                self.mark_broken(exc)
                raise
            except Exception as exc:  # torch's errors for a dead or hung peer (RuntimeError, DistError...)
                self.mark_broken(exc)
                raise GroupError(f"model-server group failed: {_first_line(exc)}") from None
            finally:
                self._last_sent = time.monotonic()

    def load(self, servable: ServableConfig, checkpoint: str | None, dtype: str, weight_format: str) -> RankModel:
        check_group_size(servable.model, self.spec.size)  # before anyone loads (random weights' shapes)
        with self.collectives() as group:
            messages.send(
                group,
                Kind.LOAD,
                messages.encode_json(
                    {
                        "servable": servable_to_json(servable),
                        "checkpoint": checkpoint,
                        "dtype": dtype,
                        "weights": weight_format,
                    }
                ),
            )
            ranked = load_rank_model(group, servable, checkpoint, dtype, weight_format)
            group.wait_all("loading the model")
        self.local_kv_heads = ranked.model.local.config.num_kv_heads
        ranked.model = LeaderModel(ranked.model, self)  # type: ignore[assignment]
        return ranked

    def allocate_cache(self, num_blocks: int, block_size: int, quantized: bool, kv_dtype: torch.dtype) -> None:
        """Every rank allocates the same number of blocks (of its own heads), so block tables agree,
        storing K/V in `kv_dtype` as the leader does."""
        code = messages.KV_DTYPES.index(kv_dtype)
        with self.collectives():
            messages.send(self.group, Kind.CACHE, torch.tensor([num_blocks, block_size, int(quantized), code]))

    def unload(self) -> None:
        """The engine stopped: workers drop their shard and cache, and wait for the next model."""
        if self.broken or self.group is None:
            return
        try:
            with self.collectives():
                messages.send(self.group, Kind.UNLOAD)
        except GroupError:
            pass  # marked broken; the owner sees it

    def _heartbeats(self) -> None:
        while not self._closing.wait(self.HEARTBEAT_S / 4):
            if self.broken or time.monotonic() - self._last_sent < self.HEARTBEAT_S:
                continue
            if self._lock.acquire(blocking=False):  # a step or load in progress speaks for us
                self._lock.release()
                try:
                    with self.collectives():
                        messages.send(self.group, Kind.HEARTBEAT)
                except GroupError:
                    pass

    def mark_broken(self, exc: BaseException) -> None:
        if not self.broken:
            log.error("model-server group broken: %s", _first_line(exc))
        self.broken = True

    def stop(self) -> None:
        """Tells the workers to exit and leaves the group."""
        self._closing.set()
        self._beat.join(5.0)
        if self.group is None:
            return
        if not self.broken:
            try:
                with self.collectives():
                    messages.send(self.group, Kind.STOP)
            except GroupError:
                pass  # a worker already gone: nothing more to tell it
        self.group.close()
        self.group = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


__all__ = ["GroupError", "GroupLeader", "LeaderModel", "load_rank_model", "servable_from_json"]

"""Rank 0 of a model-server group: it runs the engine (scheduler, block manager, sampling)
and drives the workers. Each step it broadcasts the step plan and runs its own shard of the
same forward; it alone receives the gathered logits.

All calls happen on the engine's step thread, so every rank sees collectives in one order.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch
from torch import nn

from tenor.dist import messages
from tenor.dist.group import Group, GroupError
from tenor.dist.spec import GroupSpec
from tenor.dist.messages import Kind, StepInputs
from tenor.dist.shard_loading import load_shard, open_source
from tenor.dist.shard_plan import check_group_size, plan_shard
from tenor.dist.sharded_lm import ShardedLM
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
    return ServableConfig(**{**data, "model": ModelConfig.from_dict(data["model"])})


def load_rank_model(group: Group, servable: ServableConfig, checkpoint: str | None) -> RankModel:
    """This rank's shard of the model, read from its slices of the checkpoint."""
    source = open_source(checkpoint, servable.model, servable.seed)
    shard = plan_shard(source.config, group.size, group.rank)
    dtype = parse_dtype(servable.dtype)
    local, config = load_shard(source, shard, dtype, servable.max_target_length)
    return RankModel(ShardedLM(local, shard, config.vocab_size, group), config, source.tokenizer_path, dtype)


class LeaderModel(nn.Module):
    """The leader's model: broadcasts each step's inputs, then runs its shard of the forward."""

    def __init__(self, sharded: ShardedLM, leader: "GroupLeader") -> None:
        super().__init__()
        self.sharded = sharded
        self.leader = leader

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: PagedKVCache,
                batch: AttentionBatch, logits_rows: torch.Tensor) -> torch.Tensor:
        if self.leader.broken or self.leader.group is None:
            raise GroupError("the model-server group is broken: a rank is missing")
        messages.send(self.leader.group, Kind.STEP, messages.encode_step(StepInputs(input_ids, positions, batch, logits_rows)))
        return self.sharded(input_ids, positions, cache, batch, logits_rows)


class GroupLeader:
    """The leader's side of the group: forms it, loads everyone, sends heartbeats and STOP.

    `broken` turns True once a collective failed: a worker died or hung. The group is then
    unusable (torch.distributed cannot re-form it in place); the engine reports `degraded`
    and the process's owner decides (the model server leaves the cell and exits)."""

    def __init__(self, spec: GroupSpec) -> None:
        if not spec.is_leader:
            raise ValueError("GroupLeader runs on rank 0")
        self.spec = spec
        self.group: Group | None = None
        self.broken = False
        self.local_kv_heads = 0

    def load(self, servable: ServableConfig, checkpoint: str | None) -> RankModel:
        check_group_size(servable.model, self.spec.size)  # before anyone loads (random weights' shapes)
        if self.group is None:
            self.group = Group(self.spec)
        messages.send(self.group, Kind.LOAD, messages.encode_json(
            {"servable": servable_to_json(servable), "checkpoint": checkpoint}))
        ranked = load_rank_model(self.group, servable, checkpoint)
        self.group.wait_all("loading the model")
        self.local_kv_heads = ranked.model.local.config.num_kv_heads
        ranked.model = LeaderModel(ranked.model, self)  # type: ignore[assignment]
        return ranked

    def allocate_cache(self, num_blocks: int, block_size: int, quantized: bool) -> None:
        """Every rank allocates the same number of blocks (of its own heads), so block tables agree."""
        messages.send(self.group, Kind.CACHE, torch.tensor([num_blocks, block_size, int(quantized)]))

    def heartbeat(self) -> None:
        if self.broken or self.group is None:
            return
        try:
            messages.send(self.group, Kind.HEARTBEAT)
        except Exception as exc:
            self.mark_broken(exc)

    def mark_broken(self, exc: BaseException) -> None:
        if not self.broken:
            log.error("model-server group broken: %s", str(exc).splitlines()[0] if str(exc) else exc)
        self.broken = True

    def stop(self) -> None:
        if self.group is None:
            return
        if not self.broken:
            try:
                messages.send(self.group, Kind.STOP)
            except Exception:  # a worker already gone: nothing more to tell it
                pass
        self.group.close()
        self.group = None


__all__ = ["GroupLeader", "GroupError", "LeaderModel", "load_rank_model", "servable_from_json"]

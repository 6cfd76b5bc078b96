"""Which slice of every weight each rank of a model-server group holds (pure planning, no torch).

Megatron-style tensor parallelism for the Llama family (incl. GQA) and GPT-J:

- attention: q/k/v column-parallel by *whole KV-head groups* (a rank holds some KV heads and
  the query heads that read them), o row-parallel (partial sums, all-reduced);
- MLP: gate/up (fc_in) column-parallel, down (fc_out) row-parallel;
- embedding and LM head vocab-parallel: every rank holds `vocab_per_rank` rows (the last
  rank's tail padded with zeros), embeddings are summed across ranks, logits gathered on the
  leader only.

Heads are split as evenly as whole KV heads allow, so a group size that does not divide the
KV heads still works when each rank gets at least one (SmolLM2's 3 KV heads on 2 ranks: 2 + 1);
a group larger than the KV-head count is refused. The KV cache of each rank holds its heads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tenor.models.config import ModelConfig


@dataclass(frozen=True)
class RankShard:
    """Global index ranges one rank holds."""

    rank: int
    world_size: int
    kv_heads: range
    heads: range
    ffn: range
    vocab: range  # real vocabulary rows held (the rest of `vocab_per_rank` is zero padding)
    vocab_per_rank: int

    @property
    def is_leader(self) -> bool:
        return self.rank == 0


def split_evenly(total: int, parts: int, index: int) -> range:
    """The `index`-th of `parts` contiguous ranges covering [0, total), sizes differing by at most 1."""
    base, extra = divmod(total, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (1 if index < extra else 0))


def check_group_size(config: ModelConfig, world_size: int) -> None:
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"group size must be a positive integer, got {world_size!r}")
    if world_size > config.num_kv_heads:
        raise ValueError(
            f"group size {world_size} does not divide the model's heads: it has {config.num_kv_heads} KV heads "
            f"({config.num_heads} query heads) and every rank needs at least one whole KV head"
        )
    if world_size > config.intermediate_size or world_size > config.vocab_size:
        raise ValueError(f"group size {world_size} is larger than the model's MLP width or vocabulary")


def plan_shard(config: ModelConfig, world_size: int, rank: int) -> RankShard:
    check_group_size(config, world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is out of range for a group of {world_size} (0..{world_size - 1})")
    group = config.num_heads // config.num_kv_heads
    kv = split_evenly(config.num_kv_heads, world_size, rank)
    per_rank = -(-config.vocab_size // world_size)
    vocab_start = min(rank * per_rank, config.vocab_size)
    return RankShard(
        rank=rank,
        world_size=world_size,
        kv_heads=kv,
        heads=range(kv.start * group, kv.stop * group),
        ffn=split_evenly(config.intermediate_size, world_size, rank),
        vocab=range(vocab_start, min(vocab_start + per_rank, config.vocab_size)),
        vocab_per_rank=per_rank,
    )


def local_config(config: ModelConfig, shard: RankShard) -> ModelConfig:
    """The shapes one rank's model is built with: its heads, its MLP width, its vocabulary rows."""
    return dataclasses.replace(
        config,
        num_heads=len(shard.heads),
        num_kv_heads=len(shard.kv_heads),
        intermediate_size=len(shard.ffn),
        vocab_size=shard.vocab_per_rank,
    )


@dataclass(frozen=True)
class TensorSlice:
    """How to cut one checkpoint tensor for a rank.

    `rows`: row ranges (of the tensor's first dim) to read and stack, or None for all rows;
    `cols`: a column range, or None; `pad_rows`: zero rows appended (vocab padding);
    `leader_only`: ranks other than 0 get zeros (the bias of a row-parallel linear, added once).
    """

    rows: tuple[range, ...] | None = None
    cols: range | None = None
    pad_rows: int = 0
    leader_only: bool = False


def _scaled(r: range, unit: int, offset: int = 0) -> range:
    return range(offset + r.start * unit, offset + r.stop * unit)


def tensor_slice(config: ModelConfig, shard: RankShard, name: str) -> TensorSlice:
    """The slice of tenor tensor `name` (see tenor/models/config.py) that `shard` holds.
    Quantization scales (`X.weight_scale`, one per output row) follow their weight's rows."""
    base = name[: -len("_scale")] if name.endswith(".weight_scale") else name
    e, q = config.head_dim, config.q_size
    if base in ("embed.weight", "lm_head.weight", "lm_head.bias"):
        return TensorSlice(rows=(shard.vocab,), pad_rows=shard.vocab_per_rank - len(shard.vocab))
    if base.endswith("attn.qkv.weight"):
        return TensorSlice(
            rows=(
                _scaled(shard.heads, e),
                _scaled(shard.kv_heads, e, q),
                _scaled(shard.kv_heads, e, q + config.kv_size),
            )
        )
    if base.endswith(("mlp.gate_up.weight",)):
        f = config.intermediate_size
        return TensorSlice(rows=(shard.ffn, range(f + shard.ffn.start, f + shard.ffn.stop)))
    if base.endswith(("mlp.fc_in.weight", "mlp.fc_in.bias")):
        return TensorSlice(rows=(shard.ffn,))
    if base.endswith("attn.o.weight"):
        return TensorSlice(rows=None, cols=_scaled(shard.heads, e)) if not name.endswith("_scale") else TensorSlice()
    if base.endswith(("mlp.down.weight", "mlp.fc_out.weight")):
        return TensorSlice(rows=None, cols=shard.ffn) if not name.endswith("_scale") else TensorSlice()
    if base.endswith("mlp.fc_out.bias"):
        return TensorSlice(leader_only=True)
    return TensorSlice()  # norms: every rank holds them whole

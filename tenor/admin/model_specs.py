"""What the admin checks and derives from a published model spec.

Overrides come from `tenor publish ... key=value`. Some keys are the admin's own:
`ram` (bytes one replica needs, replacing the estimate), `constraints` (comma-separated
tags a server must have), and `disaggregated`, `prefill_replicas`, `decode_replicas`
(replica roles, tenor.admin.roles). The rest are serving parameters of the servable config; values
are JSON text, and a value that is not JSON is taken as a plain string.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenor import registry
from tenor.admin.naming import CellName, parse_model_name
from tenor.admin.roles import RoleCounts, check_group_sizes, check_replicas, role_counts
from tenor.admin.store.base import ModelSpec
from tenor.errors import UserError
from tenor.registry import (
    ADMIN_KEYS,
    ServableConfig,
    model_server_overrides,
    parse_override_value,
    serving_overrides,
)

__all__ = [
    "ADMIN_KEYS",
    "Placement",
    "kv_cache_bytes",
    "model_server_overrides",
    "parse_override_value",
    "placement_of",
    "serving_overrides",
    "validate_spec",
]


def kv_cache_bytes(servable: ServableConfig) -> int:
    """The KV cache the engine allocates by default for this config (tenor.memory)."""
    return servable.memory().kv_cache_bytes


@dataclass(frozen=True)
class Placement:
    """What the assigner needs to know about a spec."""

    memory_bytes: int
    constraints: frozenset[str]
    group_sizes: tuple[int, ...] = (1,)  # model-server group sizes it may be placed on
    roles: RoleCounts | None = None  # prefill / decode split; None: interleaved ("both")


def placement_of(spec: ModelSpec) -> Placement:
    overrides = spec.overrides_map
    roles = role_counts(overrides)
    servable = registry.get(spec.config_name).with_overrides(**serving_overrides(overrides))
    check_group_sizes(roles, spec.config_name, servable.group_sizes)
    ram = overrides.get("ram")
    # By the checkpoint's real size when the admin can read it (a tiny GPT-J published under
    # the GPT-J config is placed as tiny), else by the config.
    memory = _parse_ram(ram) if ram is not None else servable.memory(spec.checkpoint).total_bytes
    tags = frozenset(t.strip() for t in overrides.get("constraints", "").split(",") if t.strip())
    # Disaggregated replicas run on single processes: only those move KV blocks.
    return Placement(memory, tags, (1,) if roles is not None else servable.group_sizes, roles)


def _parse_ram(text: str) -> int:
    value = parse_override_value(text)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise UserError(f"override ram must be a whole number of bytes >= 0, got {text!r}")
    return int(value)


def validate_spec(spec: ModelSpec, cell: CellName) -> Placement:
    """Raises UserError (one line) for anything the cell cannot serve as published."""
    name = parse_model_name(spec.name)
    if name.cell_name != cell:
        raise UserError(f"{spec.name} is not in this admin's cell {cell}")
    if spec.replicas < 0:
        raise UserError(f"replica count must be >= 0, got {spec.replicas}")
    servable = registry.get(spec.config_name)
    if spec.checkpoint is None and not servable.random_weights and servable.default_checkpoint is None:
        raise UserError(f"{spec.config_name} needs a checkpoint (only random-weight test configs take None)")
    for key in spec.overrides_map:
        if not key or key != key.strip():
            raise UserError(f"bad override key {key!r}")
    placement = placement_of(spec)
    check_replicas(placement.roles, spec.replicas)
    return placement

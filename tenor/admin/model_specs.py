"""What the admin checks and derives from a published model spec.

Overrides come from `tenor publish ... key=value`. Two keys are the admin's own:
`ram` (bytes one replica needs, replacing the estimate) and `constraints` (comma-separated
tags a server must have). The rest are serving parameters of the servable config; values
are JSON text, and a value that is not JSON is taken as a plain string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from tenor import registry
from tenor.admin.naming import CellName, parse_model_name
from tenor.admin.store.base import ModelSpec
from tenor.errors import UserError
from tenor.registry import ServableConfig

ADMIN_KEYS = frozenset({"ram", "constraints"})


def parse_override_value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def serving_overrides(overrides: Mapping[str, str]) -> dict[str, object]:
    """The overrides the model server applies to the servable config (admin keys removed)."""
    return {k: parse_override_value(v) for k, v in overrides.items() if k not in ADMIN_KEYS}


def model_server_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """The raw strings sent in Modelet.Load / UpdateLoaded."""
    return {k: v for k, v in overrides.items() if k not in ADMIN_KEYS}


def kv_cache_bytes(servable: ServableConfig) -> int:
    """Worst case: every decode slot holds a full-length sequence's keys and values."""
    m = servable.model
    per_token = 2 * m.num_layers * m.num_kv_heads * m.head_dim * (2 if servable.dtype == "bfloat16" else 4)
    return per_token * servable.max_batch_size * servable.max_target_length


@dataclass(frozen=True)
class Placement:
    """What the assigner needs to know about a spec."""

    memory_bytes: int
    constraints: frozenset[str]
    group_sizes: tuple[int, ...] = (1,)  # model-server group sizes it may be placed on


def placement_of(spec: ModelSpec) -> Placement:
    overrides = spec.overrides_map
    servable = registry.get(spec.config_name).with_overrides(**serving_overrides(overrides))
    ram = overrides.get("ram")
    memory = _parse_ram(ram) if ram is not None else servable.weight_bytes() + kv_cache_bytes(servable)
    tags = frozenset(t.strip() for t in overrides.get("constraints", "").split(",") if t.strip())
    return Placement(memory, tags, servable.group_sizes)


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
    return placement_of(spec)

"""Replica roles for disaggregated serving, as published: `tenor publish MODEL CONFIG CKPT
REPLICAS disaggregated=true prefill_replicas=P decode_replicas=D`.

Pure (no I/O): the CLI checks a publish with it before dialling the admin, and the admin
checks every publish and update with it. REPLICAS stays the model's total replica count, as
in SAX, so it must equal P + D; both P and D are at least 1 (a decode replica without a
prefill replica would only fall back to prefilling locally, and prefill replicas without a
decode replica would serve no one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tenor.errors import UserError

BOTH, PREFILL, DECODE = "both", "prefill", "decode"
ROLES = (BOTH, PREFILL, DECODE)
# Roles whose replicas take client requests (WatchLoc's default answer); prefill replicas
# are reached only by the model's decode replicas.
SERVING_ROLES = frozenset({BOTH, DECODE})
DISAGG_KEYS = frozenset({"disaggregated", "prefill_replicas", "decode_replicas"})


@dataclass(frozen=True)
class RoleCounts:
    prefill: int
    decode: int

    @property
    def total(self) -> int:
        return self.prefill + self.decode

    def demand(self) -> tuple[tuple[str, int], ...]:
        return ((PREFILL, self.prefill), (DECODE, self.decode))


def parse_role(text: str) -> str:
    """A Load request's role: "" is the default, interleaved."""
    role = text or BOTH
    if role not in ROLES:
        raise UserError(f"role must be one of {', '.join(ROLES)}, got {text!r}")
    return role


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise UserError(f"disaggregated must be true or false, got {text!r}")
    return value == "true"


def _count(key: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UserError(f"{key} must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise UserError(f"{key} must be >= 1 with disaggregated=true, got {value}")
    return value


def role_counts(overrides: Mapping[str, str]) -> RoleCounts | None:
    """The prefill / decode split the overrides ask for; None: interleaved (every replica "both").

    Raises UserError (one line) for counts without disaggregated=true, or a split that is not
    two whole numbers >= 1.
    """
    disaggregated = _flag(overrides["disaggregated"]) if "disaggregated" in overrides else False
    given = [k for k in ("prefill_replicas", "decode_replicas") if k in overrides]
    if not disaggregated:
        if given:
            raise UserError(f"{given[0]} needs disaggregated=true")
        return None
    if len(given) < 2:
        raise UserError("disaggregated=true needs prefill_replicas=P and decode_replicas=D")
    return RoleCounts(
        _count("prefill_replicas", overrides["prefill_replicas"]),
        _count("decode_replicas", overrides["decode_replicas"]),
    )


def check_replicas(counts: RoleCounts | None, replicas: int) -> None:
    if counts is not None and counts.total != replicas:
        raise UserError(
            f"replica count {replicas} must equal prefill_replicas + decode_replicas "
            f"({counts.prefill} + {counts.decode} = {counts.total})"
        )


def check_group_sizes(counts: RoleCounts | None, config_name: str, group_sizes: tuple[int, ...]) -> None:
    """Only a single-process engine exports and imports KV blocks, so a config that must run on
    a model-server group cannot take the prefill or decode role."""
    if counts is not None and 1 not in group_sizes:
        sizes = " or ".join(str(n) for n in group_sizes)
        raise UserError(
            f"{config_name} runs only on model-server groups of {sizes}, which cannot move KV "
            "blocks: it cannot be published with disaggregated=true"
        )


def check_role_values(overrides: Mapping[str, str]) -> None:
    """Checks the disaggregation values an update sets (an empty value removes a key); the whole
    split is checked by the admin once merged with what is stored."""
    if overrides.get("disaggregated"):
        _flag(overrides["disaggregated"])
    for key in ("prefill_replicas", "decode_replicas"):
        if overrides.get(key):
            _count(key, overrides[key])

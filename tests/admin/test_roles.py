"""Parsing of the publish keys that ask for prefill and decode replicas (tenor.admin.roles)."""

from __future__ import annotations

import pytest

from tenor.admin.roles import RoleCounts, check_group_sizes, check_replicas, check_role_values, parse_role, role_counts
from tenor.errors import UserError


def test_counts_and_interleaved_defaults() -> None:
    assert role_counts({}) is None
    assert role_counts({"disaggregated": "false", "ram": "1"}) is None
    counts = role_counts({"disaggregated": "True", "prefill_replicas": " 2", "decode_replicas": "3"})
    assert counts == RoleCounts(2, 3) and counts.total == 5
    assert counts.demand() == (("prefill", 2), ("decode", 3))
    check_replicas(counts, 5)
    check_replicas(None, 7)  # interleaved: any count
    check_group_sizes(counts, "c", (1, 2))
    check_group_sizes(None, "c", (8,))
    assert [parse_role(r) for r in ("", "both", "prefill", "decode")] == ["both", "both", "prefill", "decode"]
    check_role_values({"decode_replicas": "2", "prefill_replicas": "", "disaggregated": "false"})


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: role_counts({"prefill_replicas": "1"}), "prefill_replicas needs disaggregated=true"),
        (
            lambda: role_counts({"disaggregated": "false", "decode_replicas": "1"}),
            "decode_replicas needs disaggregated",
        ),
        (lambda: role_counts({"disaggregated": "1"}), "disaggregated must be true or false, got '1'"),
        (
            lambda: role_counts({"disaggregated": "true", "prefill_replicas": "1"}),
            "disaggregated=true needs prefill_replicas=P and decode_replicas=D",
        ),
        (
            lambda: role_counts({"disaggregated": "true", "prefill_replicas": "-2", "decode_replicas": "1"}),
            "prefill_replicas must be >= 1 with disaggregated=true, got -2",
        ),
        (
            lambda: role_counts({"disaggregated": "true", "prefill_replicas": "1", "decode_replicas": "0"}),
            "decode_replicas must be >= 1",
        ),
        (
            lambda: role_counts({"disaggregated": "true", "prefill_replicas": "2.0", "decode_replicas": "1"}),
            "prefill_replicas must be a whole number >= 1, got '2.0'",
        ),
        (
            lambda: check_replicas(RoleCounts(1, 2), 2),
            "replica count 2 must equal prefill_replicas + decode_replicas (1 + 2 = 3)",
        ),
        (
            lambda: check_group_sizes(RoleCounts(1, 1), "test.LmSpmdRandom", (2, 4)),
            "test.LmSpmdRandom runs only on model-server groups of 2 or 4",
        ),
        (lambda: parse_role("both,decode"), "role must be one of both, prefill, decode"),
        (lambda: check_role_values({"prefill_replicas": "x"}), "prefill_replicas must be a whole number"),
    ],
)
def test_bad_input_is_one_line(call, message) -> None:
    with pytest.raises(UserError) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)

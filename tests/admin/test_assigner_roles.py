"""Table tests for the assigner's role planning (disaggregated serving): servers with the
roles they hold + models with their prefill / decode split in, sorted plan text out."""

from __future__ import annotations

import pytest

from tenor.admin.assigner import ModelDemand, ReplicaStatus, ServerView, assign

GB = 1 << 30
L, LD, F, U = ReplicaStatus.LOADED, ReplicaStatus.LOADING, ReplicaStatus.FAILED, ReplicaStatus.UNLOADING


def srv(
    address: str,
    gb: int = 8,
    *,
    models: dict[str, ReplicaStatus] | None = None,
    roles: dict[str, str] | None = None,
    draining: bool = False,
    tags: str = "",
) -> ServerView:
    return ServerView(
        address,
        gb * GB,
        tags=frozenset(filter(None, tags.split(","))),
        models=tuple(sorted((models or {}).items())),
        draining=draining,
        roles=tuple(sorted((roles or {}).items())),
    )


def mdl(name: str, prefill: int, decode: int, gb: int = 1, *, failed: str = "", gave_up: bool = False) -> ModelDemand:
    return ModelDemand(
        name,
        "c",
        prefill + decode,
        gb * GB,
        failed_on=frozenset(filter(None, failed.split(","))),
        gave_up=gave_up,
        roles=(("prefill", prefill), ("decode", decode)),
    )


CASES = {
    "one prefill and one decode replica on two servers": (
        [srv("s1"), srv("s2")],
        [mdl("m", 1, 1)],
        "load m on s1 as prefill\nload m on s2 as decode",
    ),
    "each role goes where there is most room, never two replicas on one server": (
        [srv("s1", 4), srv("s2", 16), srv("s3", 8)],
        [mdl("m", 1, 2)],
        "load m on s1 as decode\nload m on s2 as prefill\nload m on s3 as decode",
    ),
    "held roles stay; only the missing role is placed": (
        [srv("s1", models={"m": L}, roles={"m": "decode"}), srv("s2")],
        [mdl("m", 1, 1)],
        "load m on s2 as prefill",
    ),
    "a role held beyond its count is trimmed, the other role kept": (
        [
            srv("s1", models={"m": L}, roles={"m": "prefill"}),
            srv("s2", models={"m": LD}, roles={"m": "prefill"}),
            srv("s3", models={"m": L}, roles={"m": "decode"}),
        ],
        [mdl("m", 1, 1)],
        "unload m from s2",
    ),
    "more decode replicas: only decode is added": (
        [
            srv("s1", models={"m": L}, roles={"m": "prefill"}),
            srv("s2", models={"m": L}, roles={"m": "decode"}),
            srv("s3"),
        ],
        [mdl("m", 1, 2)],
        "load m on s3 as decode",
    ),
    "interleaved replicas of a model switched to disaggregated are unloaded first": (
        [srv("s1", models={"m": L}), srv("s2", models={"m": L})],
        [mdl("m", 1, 1)],
        (
            "short m by 1: decode replicas: all 2 eligible server(s) already hold a replica\n"
            "short m by 1: prefill replicas: all 2 eligible server(s) already hold a replica\n"
            "unload m from s1\nunload m from s2"
        ),
    ),
    "a disaggregated model switched back to interleaved": (
        [
            srv("s1", models={"m": L}, roles={"m": "prefill"}),
            srv("s2", models={"m": L}, roles={"m": "decode"}),
            srv("s3"),
        ],
        [ModelDemand("m", "c", 1, GB)],
        "load m on s3\nunload m from s1\nunload m from s2",
    ),
    "too few servers for both roles: the decode role is short and says so": (
        [srv("s1")],
        [mdl("m", 1, 1)],
        "load m on s1 as prefill\nshort m by 1: decode replicas: all 1 eligible server(s) already hold a replica",
    ),
    "a failed server is not used for either role": (
        [srv("s1"), srv("s2"), srv("s3")],
        [mdl("m", 1, 1, failed="s1")],
        "load m on s2 as prefill\nload m on s3 as decode",
    ),
    "a failed replica's role is placed on another server": (
        [
            srv("s1", models={"m": F}, roles={"m": "decode"}),
            srv("s2", models={"m": L}, roles={"m": "prefill"}),
            srv("s3"),
        ],
        [mdl("m", 1, 1, failed="s1")],
        "load m on s3 as decode",
    ),
    "a draining server holds its role but gets nothing new": (
        [srv("s1", models={"m": L}, roles={"m": "prefill"}, draining=True), srv("s2")],
        [mdl("m", 1, 1)],
        "load m on s2 as decode",
    ),
    "gave up: nothing new placed, short by the sum of the roles": (
        [srv("s1"), srv("s2")],
        [mdl("m", 1, 2, gave_up=True)],
        "short m by 3: gave up after repeated load failures",
    ),
    "servers tagged with a role get it first, even with less room": (
        [srv("big", 64), srv("p", 2, tags="prefill"), srv("d", 2, tags="decode")],
        [mdl("m", 1, 1)],
        "load m on d as decode\nload m on p as prefill",
    ),
    "a server tagged for one role never takes the other": (
        [srv("p1", tags="prefill"), srv("p2", tags="prefill")],
        [mdl("m", 1, 1)],
        "load m on p1 as prefill\nshort m by 1: decode replicas: the 1 other eligible server(s) are tagged prefill",
    ),
    "untagged servers take either role": (
        [srv("d", tags="decode"), srv("x")],
        [mdl("m", 1, 2)],
        (
            "load m on d as decode\nload m on x as prefill\n"
            "short m by 1: decode replicas: all 2 eligible server(s) already hold a replica"
        ),
    ),
    "interleaved models ignore role tags": (
        [srv("p", 4, tags="prefill"), srv("d", 8, tags="decode")],
        [ModelDemand("i", "c", 2, GB)],
        "load i on d\nload i on p",
    ),
    "interleaved and disaggregated models share servers": (
        [srv("s1"), srv("s2")],
        [mdl("d", 1, 1), ModelDemand("i", "c", 2, GB)],
        "load d on s1 as prefill\nload d on s2 as decode\nload i on s1\nload i on s2",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_role_plan(name: str) -> None:
    servers, models, expected = CASES[name]
    assert assign(servers, models).render() == expected

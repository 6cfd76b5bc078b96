"""Table tests for the assigner: each case is servers + models in, sorted plan text out."""

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
    tags: str = "",
    platform: str = "cpu",
    configs: str = "",
    draining: bool = False,
) -> ServerView:
    return ServerView(
        address,
        gb * GB,
        platform,
        frozenset(filter(None, tags.split(","))),
        frozenset(filter(None, configs.split(","))),
        tuple(sorted((models or {}).items())),
        draining,
    )


def mdl(
    name: str, replicas: int, gb: int = 1, *, config: str = "c", tags: str = "", failed: str = "", gave_up: bool = False
) -> ModelDemand:
    return ModelDemand(
        name,
        config,
        replicas,
        gb * GB,
        frozenset(filter(None, tags.split(","))),
        frozenset(filter(None, failed.split(","))),
        gave_up,
    )


CASES = {
    "empty cell plans nothing": ([srv("s1")], [], ""),
    "no servers at all": ([], [mdl("m", 1)], "short m by 1: no model server has joined the cell"),
    "spreads replicas over the servers with most room": (
        [srv("s1", 8), srv("s2", 16), srv("s3", 4)],
        [mdl("m", 2)],
        "load m on s1\nload m on s2",
    ),
    "several models share one server when they fit": (
        [srv("s1", 8)],
        [mdl("a", 1, 3), mdl("b", 1, 3)],
        "load a on s1\nload b on s1",
    ),
    "bigger models are placed first": (
        [srv("s1", 8), srv("s2", 5)],
        [mdl("small", 1, 4), mdl("big", 1, 7)],
        "load big on s1\nload small on s2",
    ),
    "serving replicas stay; only the missing one is added": (
        [srv("s1", models={"m": L}), srv("s2"), srv("s3", 32)],
        [mdl("m", 2)],
        "load m on s3",
    ),
    "fewer replicas: the loading one goes before the serving one": (
        [srv("s1", models={"m": L}), srv("s2", models={"m": LD})],
        [mdl("m", 1)],
        "unload m from s2",
    ),
    "fewer replicas: the fullest server gives its replica up": (
        [srv("s1", 8, models={"m": L}), srv("s2", 32, models={"m": L})],
        [mdl("m", 1)],
        "unload m from s1",
    ),
    "zero replicas unloads everything": (
        [srv("s1", models={"m": L}), srv("s2", models={"m": L})],
        [mdl("m", 0)],
        "unload m from s1\nunload m from s2",
    ),
    "unpublished models are unloaded, unloading ones left alone": (
        [srv("s1", models={"old": L, "gone": U, "bad": F})],
        [],
        "unload bad from s1\nunload old from s1",
    ),
    "memory of unloading replicas still counts": (
        [srv("s1", 4, models={"x": U}), srv("s2", 2)],
        [mdl("x", 0, 3), mdl("m", 1, 2)],
        "load m on s2",
    ),
    "a model too big for every server is short with the numbers": (
        [srv("s1", 1)],
        [mdl("m", 1, 2)],
        f"short m by 1: needs {2 * GB} bytes per replica; most free on an eligible server is {GB}",
    ),
    "constraint tags must all be on the server": (
        [srv("s1", 64), srv("s2", 8, tags="gpu,fast")],
        [mdl("m", 1, tags="fast,gpu")],
        "load m on s2",
    ),
    "the platform counts as a tag": (
        [srv("s1", 64), srv("s2", 8, platform="cuda")],
        [mdl("m", 1, tags="cuda")],
        "load m on s2",
    ),
    "no server with the tags": (
        [srv("s1")],
        [mdl("m", 1, config="llama.X", tags="tpu")],
        "short m by 1: no server offers llama.X with tags tpu",
    ),
    "servers advertise the configs they serve": (
        [srv("s1", 64, configs="other"), srv("s2", 8, configs="c,other")],
        [mdl("m", 2)],
        "load m on s2\nshort m by 1: all 1 eligible server(s) already hold a replica",
    ),
    "never retried where it failed; tried elsewhere": (
        [srv("s1", 64, models={"m": F}), srv("s2", 8)],
        [mdl("m", 1, failed="s1")],
        "load m on s2",
    ),
    "failed everywhere": (
        [srv("s1", models={"m": F})],
        [mdl("m", 1, failed="s1")],
        "short m by 1: failed to load on every other eligible server",
    ),
    "a failure from an older generation does not block a new try": (
        [srv("s1", models={"m": F})],
        [mdl("m", 1)],
        "load m on s1",
    ),
    "gave up: no new placements, serving ones kept": (
        [srv("s1", models={"m": L}), srv("s2")],
        [mdl("m", 2, gave_up=True)],
        "short m by 1: gave up after repeated load failures",
    ),
    "a server holds one replica of a model at most": (
        [srv("s1", 64)],
        [mdl("m", 3)],
        "load m on s1\nshort m by 2: all 1 eligible server(s) already hold a replica",
    ),
    "a draining server gets nothing new": (
        [srv("s1", 64, draining=True), srv("s2", 8)],
        [mdl("m", 2)],
        "load m on s2\nshort m by 1: all 1 eligible server(s) already hold a replica",
    ),
    "a draining server keeps its replica while the count is met": (
        [srv("s1", draining=True, models={"m": L}), srv("s2")],
        [mdl("m", 1)],
        "",
    ),
    "a draining server gives up its replica first": (
        [srv("s1", 64, draining=True, models={"m": L}), srv("s2", 8, models={"m": LD})],
        [mdl("m", 1)],
        "unload m from s1",
    ),
    "over-full server after an admin restart keeps its replicas": (
        [srv("s1", 1, models={"a": L, "b": L})],
        [mdl("a", 1, 1), mdl("b", 1, 1)],
        "",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_assign(case: str) -> None:
    servers, models, expected = CASES[case]
    assert assign(servers, models).render() == expected


def test_shortfall_reasons_use_candidates_only() -> None:
    # The eligible server's room is what the reason reports, not an ineligible server's.
    plan = assign([srv("s1", 64, configs="other"), srv("s2", 1)], [mdl("m", 1, 2)])
    assert plan.render() == f"short m by 1: needs {2 * GB} bytes per replica; most free on an eligible server is {GB}"


def test_plan_is_independent_of_input_order() -> None:
    servers = [srv(f"s{i}", 4 + i % 3) for i in range(6)]
    models = [mdl(f"m{i}", 1 + i % 3, 1 + i % 2) for i in range(5)]
    assert assign(servers, models).render() == assign(servers[::-1], models[::-1]).render()


def test_group_requiring_models_go_only_to_groups_of_that_size():
    servers = [
        ServerView("single", 64 * GB),
        ServerView("pair", 16 * GB, group_size=2),
        ServerView("octet", 8 * GB, group_size=8),
    ]
    spmd = ModelDemand("spmd", "test.LmSpmdRandom", 1, GB, group_sizes=(2,))
    either = ModelDemand("gptj", "gptj", 2, GB, group_sizes=(1, 8))
    plain = ModelDemand("plain", "c", 1, GB)
    assert (
        assign(servers, [spmd, either, plain]).render()
        == "load gptj on octet\nload gptj on single\nload plain on single\nload spmd on pair"
    )
    short = assign([ServerView("single", 64 * GB)], [spmd]).render()
    assert short == "short spmd by 1: no server offers test.LmSpmdRandom as a group of 2"

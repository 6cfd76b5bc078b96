from __future__ import annotations

from tenor.admin.status_page import render_html
from tenor.proto import admin_pb2, common_pb2


def test_page_lists_models_replicas_and_servers_escaped() -> None:
    models = admin_pb2.ListResponse(
        models=[
            admin_pb2.PublishedModel(
                model=admin_pb2.Model(
                    model_name="/tenor/c/lm", config_name="test.TinyLlamaRandom", requested_replicas=2
                ),
                addresses=["h:1"],
                replicas=[
                    admin_pb2.Replica(address="h:1", status=common_pb2.LOADED),
                    admin_pb2.Replica(address="h:2", status=common_pb2.FAILED, failure_reason="<boom>"),
                ],
                failure_reason="h:2: <boom>",
                shortfall="1 replica(s) short: no room",
            )
        ]
    )
    stats = admin_pb2.StatsResponse(
        servers=[
            admin_pb2.ServerInfo(
                address="h:1",
                spec=common_pb2.ServerSpec(platform="cpu", memory_bytes=3 << 30, tags=["a"]),
                healthy=True,
                memory_used_bytes=5 << 20,
                models=[
                    admin_pb2.ModelOnServer(
                        model_name="/tenor/c/lm", status=common_pb2.LOADED, queue_depth=3, latency_p50_ms=12.4
                    )
                ],
            )
        ]
    )
    page = render_html("/tenor/c", "leader", "", models, stats)
    assert "<b>leader</b>" in page and "1/2" in page
    assert "h:1 (LOADED), h:2 (FAILED)" in page
    assert "&lt;boom&gt;" in page and "<boom>" not in page
    assert "5.0 MiB of 3.0 GiB" in page and "queue 3, p50 12 ms" in page


def test_standby_page_names_the_leader() -> None:
    page = render_html("/tenor/c", "standby", "10.0.0.1:10000", None, None)
    assert "<b>standby</b>" in page and "Active admin: 10.0.0.1:10000" in page and "<h2>" not in page


def test_page_names_prefill_and_decode_roles() -> None:
    models = admin_pb2.ListResponse(
        models=[
            admin_pb2.PublishedModel(
                model=admin_pb2.Model(
                    model_name="/tenor/c/lm", config_name="test.TinyLlamaRandom", requested_replicas=2
                ),
                addresses=["h:1", "h:2"],
                replicas=[
                    admin_pb2.Replica(address="h:1", status=common_pb2.LOADED, role="prefill"),
                    admin_pb2.Replica(address="h:2", status=common_pb2.LOADING, role="decode"),
                ],
            )
        ]
    )
    page = render_html("/tenor/c", "leader", "", models, None)
    assert "h:1 (LOADED, prefill), h:2 (LOADING, decode)" in page and "2/2" in page

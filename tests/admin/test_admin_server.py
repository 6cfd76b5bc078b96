"""The admin server as a real process on a file:// root, with fake model servers."""

from __future__ import annotations

import grpc
import httpx
import pytest

from tenor.client.admin_client import AdminClient, AdminError
from tenor.proto import admin_pb2, admin_pb2_grpc, common_pb2
from tests.fakes.cell import AdminProcess, wait_until
from tests.fakes.modelet import FakeModelServer
from tests.fakes.token import cell_token

CELL = "/tenor/test"
MODEL = "/tenor/test/lm"
TINY = "test.TinyLlamaRandom"


@pytest.fixture
def root(tmp_path) -> str:
    return f"file://{tmp_path}"


@pytest.fixture
def admin(root):
    with AdminProcess(root, CELL) as process:
        yield process.wait_leader()


@pytest.fixture
def client(root, admin):
    c = AdminClient(root, CELL, timeout_s=10)
    yield c
    c.close()


def test_publish_places_replicas_and_bad_input_is_refused(root, admin, client) -> None:
    with FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
        model = client.publish(MODEL, TINY, None, 2, {"max_batch_size": "4"})
        assert model.uuid and model.requested_replicas == 2
        addresses = client.wait_for_ready(MODEL, 2, timeout_s=10)
        assert sorted(addresses) == sorted([s1.address, s2.address])
        assert s1.modelet.models[MODEL].overrides == {"max_batch_size": "4"}
        (listed,) = client.list(MODEL)
        assert listed.model.config_name == TINY and list(listed.addresses) == sorted(addresses)
        assert {r.status for r in listed.replicas} == {common_pb2.LOADED}

        cases = [
            (lambda: client.publish(MODEL, TINY, None, 1), grpc.StatusCode.ALREADY_EXISTS, "already published"),
            (
                lambda: client.publish("/tenor/test/x", "nope.Model", None, 1),
                grpc.StatusCode.INVALID_ARGUMENT,
                "unknown model config 'nope.Model'",
            ),
            (lambda: client.publish("/tenor/test/x", TINY, None, -1), grpc.StatusCode.INVALID_ARGUMENT, ">= 0"),
            (lambda: client.publish("/tenor/test", TINY, None, 1), grpc.StatusCode.INVALID_ARGUMENT, "bad model name"),
            (
                lambda: client.publish("/tenor/other/x", TINY, None, 1),
                grpc.StatusCode.INVALID_ARGUMENT,
                "not in this admin's cell",
            ),
            (
                lambda: client.publish("/tenor/test/x", TINY, None, 1, {"nope": "1"}),
                grpc.StatusCode.INVALID_ARGUMENT,
                "unknown override(s) nope",
            ),
            (
                lambda: client.publish("/tenor/test/x", "llama.SmolLM2_135M_Instruct" + "x", None, 1),
                grpc.StatusCode.INVALID_ARGUMENT,
                "unknown model config",
            ),
            (lambda: client.update("/tenor/test/missing", replicas=1), grpc.StatusCode.NOT_FOUND, "not published"),
            (lambda: client.update(MODEL, replicas=-3), grpc.StatusCode.INVALID_ARGUMENT, ">= 0"),
            (lambda: client.unpublish("/tenor/test/missing"), grpc.StatusCode.NOT_FOUND, "not published"),
            (lambda: client.list("/tenor/test/missing"), grpc.StatusCode.NOT_FOUND, "not published"),
            (lambda: client.wait_for_ready(MODEL, 0, timeout_s=2), grpc.StatusCode.INVALID_ARGUMENT, ">= 1"),
        ]
        for call, code, text in cases:
            with pytest.raises(AdminError) as info:
                call()
            assert info.value.code == code, (text, info.value)
            assert text in str(info.value) and "\n" not in str(info.value)
        assert len(client.list()) == 1  # still serving, nothing half-published


def test_replica_changes_never_reload_serving_replicas(root, admin, client) -> None:
    with FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
        client.publish(MODEL, TINY, None, 2)
        client.wait_for_ready(MODEL, 2, timeout_s=10)
        client.update(MODEL, replicas=1)
        wait_until(lambda: len(client.list(MODEL)[0].replicas) == 1, 10, "one replica")
        (survivor,) = client.list(MODEL)[0].addresses
        client.update(MODEL, replicas=2)
        client.wait_for_ready(MODEL, 2, timeout_s=10)
        by_address = {s.address: s for s in (s1, s2)}
        assert by_address[survivor].modelet.loads[MODEL] == 1
        assert sum(s.modelet.updates[MODEL] for s in (s1, s2)) == 0
        client.unpublish(MODEL)
        wait_until(lambda: all(s.modelet.status_of(MODEL) == common_pb2.NONE for s in (s1, s2)), 10, "unloads")
        assert client.list() == []


def test_standby_refuses_serves_its_page_and_takes_over_on_sigterm(root) -> None:
    with AdminProcess(root, CELL) as first:
        first.wait_leader()
        with AdminProcess(root, CELL) as second:
            second.wait_serving()
            channel = grpc.insecure_channel(second.address)
            with pytest.raises(grpc.RpcError) as info:
                admin_pb2_grpc.AdminStub(channel).List(
                    admin_pb2.ListRequest(), timeout=5, metadata=[("authorization", f"Bearer {cell_token(root)}")]
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "standby" in info.value.details()
            channel.close()
            assert _get(second.http_port, "/healthz") == (200, "standby\n")
            assert first.address in _get(second.http_port, "/")[1]

            client = AdminClient(root, CELL, timeout_s=10)
            with FakeModelServer(root, CELL) as server:
                client.publish(MODEL, TINY, None, 1)
                client.wait_for_ready(MODEL, 1, timeout_s=10)
                status, page = _get(first.http_port, "/")
                assert status == 200 and MODEL in page and server.address in page and "LOADED" in page
                assert _get(first.http_port, "/nope")[0] == 404

                assert first.terminate() == 0  # a clean stop releases the lead at once
                second.wait_leader(timeout_s=10)
                assert client.list(MODEL)[0].model.requested_replicas == 1
                assert client.wait_for_ready(MODEL, 1, timeout_s=10) == [server.address]
                assert server.modelet.loads[MODEL] == 1
            client.close()


def test_acknowledged_publish_survives_kill_9(root) -> None:
    with AdminProcess(root, CELL) as first:
        first.wait_leader()
        client = AdminClient(root, CELL, timeout_s=10)
        client.publish(MODEL, TINY, "/some/ckpt", 3, {"ram": "1000"})
        first.kill()
    with AdminProcess(root, CELL) as second:
        second.wait_leader()
        (listed,) = client.list(MODEL)
        assert (listed.model.checkpoint, listed.model.requested_replicas, dict(listed.model.overrides)) == (
            "/some/ckpt",
            3,
            {"ram": "1000"},
        )
        client.close()


def _get(port: int, path: str) -> tuple[int, str]:
    response = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    return response.status_code, response.text


def test_republishing_a_name_with_another_config_replaces_its_replicas(root, admin, client) -> None:
    with FakeModelServer(root, CELL) as s1, FakeModelServer(root, CELL) as s2:
        client.publish(MODEL, TINY, None, 2)
        client.wait_for_ready(MODEL, 2, timeout_s=10)
        client.unpublish(MODEL)
        client.publish(MODEL, "test.TinyGPTJRandom", None, 2)

        def replaced() -> bool:
            return all(
                s.modelet.status_of(MODEL) == common_pb2.LOADED
                and s.modelet.models[MODEL].config_name == "test.TinyGPTJRandom"
                for s in (s1, s2)
            )

        wait_until(replaced, 10, "both servers to serve the new config")
        assert len(client.wait_for_ready(MODEL, 2, timeout_s=10)) == 2

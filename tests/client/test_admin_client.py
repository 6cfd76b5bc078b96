"""The admin client's failure modes: no admin, a dead admin, an unpublished model."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from tenor.admin.naming import CellName
from tenor.admin.store import AdminLocation
from tenor.admin.store.file import FileCellStore, write_durably
from tenor.client.admin_client import AdminClient, AdminError, AdminUnavailableError
from tests.fakes.cell import AdminProcess, free_port, wait_until

CELL = "/tenor/ac"


def test_no_admin_yet_is_unavailable_with_a_reason(tmp_path) -> None:
    client = AdminClient(str(tmp_path), CELL, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(AdminUnavailableError, match="no admin server has started for /tenor/ac"):
        client.list()
    assert time.monotonic() - started < 3
    client.close()


def test_dead_admin_address_is_retried_until_the_timeout(tmp_path) -> None:
    store = FileCellStore(tmp_path, CellName("ac"))
    store.ensure_cell()
    dead = f"127.0.0.1:{free_port()}"
    write_durably(store.location_path, AdminLocation(dead, "gone").to_bytes())
    client = AdminClient(str(tmp_path), CELL, timeout_s=0.8)
    with pytest.raises(AdminUnavailableError, match=dead):
        client.stats()
    client.close()


def test_client_waits_for_an_admin_that_starts_later(tmp_path) -> None:
    client = AdminClient(str(tmp_path), CELL, timeout_s=20)
    with AdminProcess(str(tmp_path), CELL) as admin:
        assert client.list() == []  # retried until the admin came up
        with pytest.raises(AdminError) as info:
            client.list("/tenor/ac/none")
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        admin.kill()
    client.close()


def test_watch_ends_with_not_found_when_the_model_is_unpublished(tmp_path) -> None:
    with AdminProcess(str(tmp_path), CELL) as admin:
        admin.wait_leader()
        client = AdminClient(str(tmp_path), CELL, timeout_s=10)
        client.publish("/tenor/ac/m", "test.TinyLlamaRandom", None, 0)
        watch = client.watch_loc("/tenor/ac/m")
        seen, errors = [], []

        def read() -> None:
            try:
                seen.extend(watch)
            except AdminError as exc:
                errors.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_until(lambda: seen, 10, "the first update")
        assert seen[0].reset and seen[0].addresses == ()
        client.unpublish("/tenor/ac/m")
        reader.join(timeout=10)
        assert errors and errors[0].code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(AdminError) as info:
            list(client.watch_loc("/tenor/ac/none"))
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        client.close()

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tenor.admin.naming import CellName
from tenor.admin.store import (
    AdminLocation,
    CellState,
    LostLeadership,
    ModelSpec,
    StoreError,
    list_cells,
    open_store,
    parse_root,
    resolve_root,
)
from tenor.admin.store.file import FileCellStore
from tenor.errors import UserError

CELL = CellName("c")
SPEC = ModelSpec.make("/tenor/c/lm", "test.TinyLlamaRandom", None, 2, {"b": "1", "a": "x"}, "u1")


def test_state_round_trips_durably(tmp_path) -> None:
    store = FileCellStore(tmp_path, CELL)
    assert store.load_state() == CellState()
    lead = store.try_lead(AdminLocation("127.0.0.1:1", "id1"))
    assert lead is not None
    state = CellState().with_model(SPEC)
    store.save_state(state, lead)
    assert FileCellStore(tmp_path, CELL).load_state() == state
    assert [p.name for p in store.cell_dir.iterdir() if p.name.startswith(".")] == []  # no temp files left
    assert state.without_model(SPEC.name) == CellState()


def test_only_one_leader_until_it_dies(tmp_path) -> None:
    a, b = FileCellStore(tmp_path, CELL), FileCellStore(tmp_path, CELL)
    lead = a.try_lead(AdminLocation("h:1", "a"))
    assert lead is not None and b.try_lead(AdminLocation("h:2", "b")) is None
    assert b.read_location().admin_id == "a"
    lead.release()
    with pytest.raises(LostLeadership):
        a.save_state(CellState(), lead)
    assert b.try_lead(AdminLocation("h:2", "b")) is not None
    assert a.read_location().admin_id == "b"


def test_lock_is_released_when_the_holder_is_killed(tmp_path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from tenor.admin.store.file import FileCellStore; "
                "from tenor.admin.naming import CellName; from tenor.admin.store import AdminLocation; "
                f"s = FileCellStore({str(tmp_path)!r}, CellName('c')); assert s.try_lead(AdminLocation('h:9', 'x')); "
                "print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        store = FileCellStore(tmp_path, CELL)
        assert store.try_lead(AdminLocation("h:1", "me")) is None
        holder.kill()
        holder.wait(timeout=10)
        assert store.try_lead(AdminLocation("h:1", "me")) is not None
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_removed_lock_file_means_lost_leadership(tmp_path) -> None:
    store = FileCellStore(tmp_path, CELL)
    lead = store.try_lead(AdminLocation("h:1", "a"))
    lead.keepalive()
    os.unlink(store.cell_dir / "admin.lock")
    with pytest.raises(LostLeadership, match="removed or replaced"):
        lead.keepalive()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "corrupt cell state"),
        (b'{"version": 9, "models": []}', "unsupported state version 9"),
        (b'{"version": 1, "models": [{"name": "/x"}]}', "corrupt cell state"),
        (b'{"version": 1, "models": [{"name": "/tenor/c/m", "config_name": "c", "replicas": -1}]}', "replicas"),
    ],
)
def test_corrupt_state_is_a_clear_error(tmp_path, content, message) -> None:
    store = FileCellStore(tmp_path, CELL)
    store.ensure_cell()
    store.state_path.write_bytes(content)
    with pytest.raises(StoreError, match=message):
        store.load_state()


def test_placeholder_location_reads_as_none(tmp_path) -> None:
    store = FileCellStore(tmp_path, CELL)
    store.ensure_cell()
    assert store.read_location() is None
    store.location_path.write_text("No admin server has been started for this cell.")
    assert store.read_location() is None


def test_roots_parse_and_resolve(tmp_path, monkeypatch) -> None:
    assert parse_root("etcd://127.0.0.1:2379").prefix == ""
    assert parse_root("etcd://h:1/a/b").prefix == "/a/b"
    assert parse_root(f"file://{tmp_path}").location == str(tmp_path)
    assert parse_root(str(tmp_path)).kind == "file"
    for bad in ("etcd://h", "etcd://h:99999", "etcd://h:1/a b", "gs://x", "file://", "memory://"):
        with pytest.raises(UserError):
            parse_root(bad)
    monkeypatch.setenv("TENOR_ROOT", str(tmp_path))
    assert resolve_root(None) == str(tmp_path)
    assert resolve_root("etcd://h:1") == "etcd://h:1"
    monkeypatch.delenv("TENOR_ROOT")
    with pytest.raises(UserError, match="no cell root"):
        resolve_root(None)
    with pytest.raises(UserError, match="is not a directory"):
        open_store(str(tmp_path / "missing"), CELL)


def test_list_cells(tmp_path) -> None:
    assert list_cells(str(tmp_path)) == []
    for name in ("b", "a"):
        FileCellStore(tmp_path, CellName(name)).ensure_cell()
    (tmp_path / "tenor" / "not-a-cell").mkdir()
    assert list_cells(str(tmp_path)) == [CellName("a"), CellName("b")]

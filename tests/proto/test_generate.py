"""The committed generated code is exactly what `python -m tenor.proto.generate` makes."""

from __future__ import annotations

import shutil
from pathlib import Path

from tenor.proto.generate import PROTO_DIR, generate


def test_generated_code_is_committed_and_deterministic(tmp_path: Path) -> None:
    copy = tmp_path / "tenor" / "proto"
    copy.mkdir(parents=True)
    for proto in PROTO_DIR.glob("*.proto"):
        shutil.copy(proto, copy)
    written = generate(copy)
    assert {p.name for p in written} >= {"admin_pb2.py", "admin_pb2_grpc.py", "modelet_pb2.py", "common_pb2.py"}
    stale = [p.name for p in written if p.read_text() != (PROTO_DIR / p.name).read_text()]
    assert stale == [], f"run `python -m tenor.proto.generate`: {stale} differ"
    for path in written:
        assert "from tenor.proto import" not in path.read_text()  # package-relative imports only

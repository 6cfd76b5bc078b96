"""Compiles every tenor/proto/*.proto into tenor/proto/*_pb2.py, *_pb2.pyi and *_pb2_grpc.py.

Run `python -m tenor.proto.generate` after changing a .proto; the output is committed.
Protos import each other as "tenor/proto/x.proto" so that their names in the protobuf
descriptor pool cannot clash with another package's "common.proto"; the generated
imports are then rewritten to package-relative ones so the package can be vendored.
Output depends only on the .proto files and the grpcio-tools version.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent.parent
_ABSOLUTE_IMPORT = re.compile(r"^from tenor\.proto import (\w+_pb2)( as \w+)?$", re.MULTILINE)


def _relativize(path: Path) -> None:
    text = path.read_text()
    fixed = _ABSOLUTE_IMPORT.sub(r"from . import \1\2", text)
    if fixed != text:
        path.write_text(fixed)


def generate(proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Compiles the protos in `proto_dir` (a `<root>/tenor/proto` folder); returns the files written, sorted."""
    from grpc_tools import protoc  # a build-time dependency only

    repo_root = proto_dir.parent.parent
    protos = sorted(proto_dir.glob("*.proto"))
    if not protos:
        raise FileNotFoundError(f"no .proto files in {proto_dir}")
    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "protoc",
        f"-I{repo_root}",
        f"-I{include}",
        f"--python_out={repo_root}",
        f"--pyi_out={repo_root}",
        f"--grpc_python_out={repo_root}",
        *(str(p.relative_to(repo_root)) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed; see the messages above")
    written = []
    for proto in protos:
        stem = proto.stem
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            out = proto_dir / f"{stem}{suffix}"
            if out.exists():
                _relativize(out)
                written.append(out)
    return sorted(written)


def main() -> int:
    for path in generate():
        print(path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())

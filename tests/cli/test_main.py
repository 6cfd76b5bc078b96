"""The `tenor` command's parser: every command builds it, so it must stay cheap to import."""

import json
import subprocess
import sys

# Each costs a few hundred milliseconds to import; together they made `tenor --help` and every
# cell command (`tenor ls`, `tenor publish`, ...) take ~1.3 s instead of ~0.5 s.
HEAVY = ("torch", "fastapi", "uvicorn", "pydantic", "transformers")


def test_building_the_parser_imports_no_heavy_package():
    # What the interpreter had before (a sitecustomize may import torch: benchmarks/cpu_proxy.py's
    # does, in every process) is not the parser's doing.
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "from tenor.cli.main import build_parser\n"
        "build_parser()\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules and m not in before]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == []


def test_help_lists_every_command():
    out = subprocess.run(
        [sys.executable, "-m", "tenor.cli.main", "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    for verb in ("serve", "generate", "convert", "publish", "lm.generate", "bench"):
        assert verb in out.stdout

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.avx2_proxy import narrow_cpuinfo

REPO = Path(__file__).resolve().parents[2]


def test_narrowed_cpuinfo_keeps_avx2_and_drops_what_avx2_cpus_lack():
    text = "processor\t: 0\nmodel name\t: X\nflags\t\t: fma avx2 avx512f avx512_bf16 amx_tile avx_vnni f16c\n"
    narrowed = narrow_cpuinfo(text)
    flags = next(line for line in narrowed.splitlines() if line.startswith("flags")).split(":")[1].split()
    assert flags == ["fma", "avx2", "f16c"]
    assert "model name\t: X" in narrowed


@pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text(), reason="needs an x86 CPU with AVX2")
def test_a_narrowed_process_sees_avx2_only_everywhere():
    code = (
        "from benchmarks.avx2_proxy import narrow_to_avx2; narrow_to_avx2(); import json, torch; "
        "from tenor.hardware import cpu_info; from tenor.models import native; "
        "print(json.dumps([sorted(cpu_info().flags), torch.backends.cpu.get_cpu_capability(), native.FLAGS]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    flags, capability, build_flags = json.loads(done.stdout.strip().splitlines()[-1])
    assert "avx2" in flags and not [f for f in flags if f.startswith(("avx512", "amx", "avx_vnni"))]
    assert capability == "AVX2"
    assert "-march=haswell" in build_flags and "-march=native" not in build_flags

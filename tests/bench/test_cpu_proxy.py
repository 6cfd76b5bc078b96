import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cpu_proxy import PROFILES, main, narrow_cpuinfo, narrow_to

REPO = Path(__file__).resolve().parents[2]
SAMPLE = (
    "processor\t: 0\nmodel name\t: X\nflags\t\t: fma avx2 avx512f avx512cd avx512bw avx512dq avx512vl avx512_vnni "
    "avx512_bf16 avx512_fp16 avx512vbmi amx_tile amx_int8 avx_vnni f16c\n"
)


def _flags(text: str) -> list[str]:
    return next(line for line in text.splitlines() if line.startswith("flags")).split(":")[1].split()


def _host_flags() -> set[str]:
    try:
        return set(_flags(Path("/proc/cpuinfo").read_text()))
    except (OSError, StopIteration):
        return set()


def test_narrowed_cpuinfo_keeps_avx2_and_drops_what_avx2_cpus_lack():
    narrowed = narrow_cpuinfo(SAMPLE)
    assert _flags(narrowed) == ["fma", "avx2", "f16c"]
    assert "model name\t: X" in narrowed
    assert narrow_cpuinfo(SAMPLE, "avx2") == narrowed


def test_narrowed_cpuinfo_keeps_avx512_and_vnni_and_drops_bf16_amx_and_avx_vnni():
    flags = _flags(narrow_cpuinfo(SAMPLE, "avx512"))
    assert flags == ["fma", "avx2", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "f16c"]


def test_an_unknown_isa_is_a_value_error_naming_the_choices(capsys):
    for call in (lambda: narrow_cpuinfo(SAMPLE, "avx10"), lambda: narrow_to("avx10")):
        with pytest.raises(ValueError, match="avx10.*avx2, avx512"):
            call()
    assert main(["--isa", "avx10", "serve"]) == 2 and main(["--isa=avx10"]) == 2 and main(["--isa"]) == 2
    assert "avx2, avx512" in capsys.readouterr().err


# isa: the host flags the profile keeps and needs, torch's capability and the kernels' -march
CASES = {
    "avx2": ({"avx2", "fma"}, "AVX2", "-march=haswell"),
    "avx512": (
        {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"},
        "AVX512",
        "-march=cascadelake",
    ),
}


@pytest.mark.parametrize("isa", sorted(CASES))
def test_a_narrowed_process_sees_that_cpu_everywhere(isa):
    needs, capability, march = CASES[isa]
    missing = needs - _host_flags()
    if missing:
        pytest.skip(f"this CPU lacks {' '.join(sorted(missing))}, which the {isa} profile keeps")
    code = (
        f"from benchmarks.cpu_proxy import narrow_to; narrow_to({isa!r}); import json, torch; "
        "from tenor.hardware import cpu_info; from tenor.models import native; "
        "print(json.dumps([sorted(cpu_info().flags), torch.backends.cpu.get_cpu_capability(), native.FLAGS]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    flags, got_capability, build_flags = json.loads(done.stdout.strip().splitlines()[-1])
    assert needs <= set(flags) and not [f for f in flags if f.startswith(PROFILES[isa].dropped)]
    assert got_capability == capability
    assert march in build_flags and "-march=native" not in build_flags

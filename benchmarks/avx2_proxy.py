"""Runs tenor as an AVX2-only CPU would, on a wider one: tenor's CPU detection sees no AVX-512,
AMX or VNNI flag (so it chooses dtype and kernels as there), its kernels are built for Haswell,
and torch, oneDNN, FBGEMM and MKL are held to AVX2. A proxy for the code paths only: the memory
system and the clock stay this host's.

    python benchmarks/avx2_proxy.py serve [flags]     # any tenor command line
    python benchmarks/step_profile.py --as-avx2 ...   # in process
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

AVX2_ENV = {  # torch's own kernels, oneDNN, FBGEMM and MKL each pick their instructions apart
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
BEYOND_AVX2 = ("avx512", "amx", "avx_vnni", "avx_ifma", "avx_ne_convert")


def narrow_cpuinfo(text: str) -> str:
    """/proc/cpuinfo's text without the flags an AVX2-only x86 CPU lacks."""
    lines = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if key.strip() == "flags":
            value = " " + " ".join(f for f in value.split() if not f.startswith(BEYOND_AVX2))
        lines.append(key + sep + value)
    return "\n".join(lines)


def narrow_to_avx2() -> None:
    """Re-runs this process with the libraries held to AVX2 if it is not yet (they read the
    variables once, at start), then narrows tenor's CPU detection and kernel build. Call before
    any engine starts."""
    if any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, **AVX2_ENV})
    import tenor.hardware as hardware
    from tenor.models import native

    read = hardware._read
    hardware._read = lambda path: narrow_cpuinfo(read(path)) if path == "/proc/cpuinfo" else read(path)
    hardware.cpu_info.cache_clear()
    native.FLAGS = tuple("-march=haswell" if f == "-march=native" else f for f in native.FLAGS)


def main() -> int:
    narrow_to_avx2()
    from tenor.cli.main import main as tenor_main

    return tenor_main(sys.argv[1:])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())

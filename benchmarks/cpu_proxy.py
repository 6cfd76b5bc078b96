"""Runs tenor as a narrower x86 CPU would, on a wider Intel Xeon: tenor's CPU detection sees only
that CPU's flags (so it chooses dtype and kernels as there), its kernels are built for that CPU,
and torch, oneDNN, FBGEMM and MKL are held to its instructions. Two CPUs (--isa):

- avx2: AVX2 + FMA only (Haswell): no AVX-512, VNNI or AMX;
- avx512: Cascade Lake: AVX-512 F/CD/BW/DQ/VL + AVX512-VNNI, no bf16, AMX or AVX-VNNI.

Every Python process it starts runs narrowed too (group workers, the model servers an
integration test starts: benchmarks/proxy_site/sitecustomize.py). A proxy for the code paths
only: the memory system and the clock stay this host's.

    python benchmarks/cpu_proxy.py [--isa avx2|avx512] serve [flags]   # any tenor command line
    python benchmarks/step_profile.py --as-cpu avx512 ...              # in process
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    env: dict[str, str]  # torch's own kernels, oneDNN, FBGEMM and MKL each pick their instructions apart
    dropped: tuple[str, ...]  # prefixes of the /proc/cpuinfo flags this CPU lacks
    march: str  # what tenor's kernels are built for, in place of -march=native


PROFILES = {
    "avx2": Profile(
        env={
            "ATEN_CPU_CAPABILITY": "avx2",
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        },
        dropped=("avx512", "amx", "avx_vnni", "avx_ifma", "avx_ne_convert"),
        march="-march=haswell",
    ),
    "avx512": Profile(
        env={
            "ATEN_CPU_CAPABILITY": "avx512",
            "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512_E1",
            "MKL_ENABLE_INSTRUCTIONS": "AVX512_E1",
        },
        dropped=(
            "avx512_bf16",
            "avx512_fp16",
            "amx",
            "avx_vnni",
            "avx512vbmi",
            "avx512_vbmi2",
            "avx512ifma",
            "avx512_bitalg",
            "avx512_vpopcntdq",
            "avx_ifma",
            "avx_ne_convert",
        ),
        march="-march=cascadelake",
    ),
}


def profile(isa: str) -> Profile:
    """The profile named `isa`; raises ValueError naming the choices for another name."""
    try:
        return PROFILES[isa]
    except KeyError:
        raise ValueError(f"unknown isa {isa!r}: choose from {', '.join(PROFILES)}") from None


def narrow_cpuinfo(text: str, isa: str = "avx2") -> str:
    """/proc/cpuinfo's text without the flags the `isa` CPU lacks."""
    dropped = profile(isa).dropped
    lines = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if key.strip() == "flags":
            value = " " + " ".join(f for f in value.split() if not f.startswith(dropped))
        lines.append(key + sep + value)
    return "\n".join(lines)


# Holds a sitecustomize.py that narrows every child Python process the same way (see there).
CHILDREN_SITE = Path(__file__).resolve().parent / "proxy_site"


def _environment(isa: str) -> dict[str, str]:
    """The variables a process narrowed to `isa` runs with: the profile's, and what makes its
    child Python processes narrow themselves."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CHILDREN_SITE) not in paths:
        paths.insert(0, str(CHILDREN_SITE))
    return {**profile(isa).env, "TENOR_PROXY_ISA": isa, "PYTHONPATH": os.pathsep.join(paths)}


def narrow_to(isa: str) -> None:
    """Re-runs this process with the libraries held to `isa` if it is not yet (they read the
    variables once, at start), then narrows tenor's CPU detection and kernel build, here and in
    every Python process it starts. Call before any engine starts."""
    chosen, wanted = profile(isa), _environment(isa)
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, **wanted})
    import tenor.hardware as hardware
    from tenor.models import native

    if getattr(hardware, "proxied_isa", None) == isa:  # narrowed at start-up (proxy_site) already
        return
    hardware.proxied_isa = isa  # type: ignore[attr-defined]
    read = hardware._read
    hardware._read = lambda path: narrow_cpuinfo(read(path), isa) if path == "/proc/cpuinfo" else read(path)
    hardware.cpu_info.cache_clear()
    native.FLAGS = tuple(chosen.march if f == "-march=native" else f for f in native.FLAGS)


def narrow_to_avx2() -> None:
    narrow_to("avx2")


def main(argv: list[str] | None = None) -> int:
    """`[--isa ISA] TENOR_ARGS...`: a leading --isa (default avx2), the rest to tenor's CLI."""
    args = sys.argv[1:] if argv is None else list(argv)
    isa = "avx2"
    if args and args[0] == "--isa":
        isa, args = (args[1], args[2:]) if len(args) > 1 else ("", [])
    elif args and args[0].startswith("--isa="):
        isa, args = args[0].partition("=")[2], args[1:]
    if isa not in PROFILES:
        print(f"cpu_proxy: error: --isa must be one of {', '.join(PROFILES)}, not {isa!r}", file=sys.stderr)
        return 2
    narrow_to(isa)
    from tenor.cli.main import main as tenor_main

    return tenor_main(args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())

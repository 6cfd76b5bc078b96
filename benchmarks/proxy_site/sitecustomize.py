"""Runs every Python process started under benchmarks/cpu_proxy.py as the proxied CPU: group
workers, model servers an integration test starts, `tenor` commands. cpu_proxy.narrow_to puts
this folder on PYTHONPATH and names the CPU in TENOR_PROXY_ISA; Python imports this module at
start-up, before the process's own code."""

import os

if os.environ.get("TENOR_PROXY_ISA"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    from benchmarks.cpu_proxy import narrow_to

    narrow_to(os.environ["TENOR_PROXY_ISA"])

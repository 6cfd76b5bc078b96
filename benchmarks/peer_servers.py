"""The servers a serving comparison starts: tenor, the naive HF baseline and llama.cpp's
llama-server, each as a child process in its own process group on a free loopback port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.cpu_proxy import PROFILES

HERE = Path(__file__).resolve().parent
DEFAULT_LLAMA_SERVER = Path("/work/peers/build/bin/llama-server")
# Tokens a llama-server slot needs: the longest prompt (about 350 tokens with the chat
# template) plus 128 generated, rounded up with room to spare.
LLAMA_CTX_PER_SLOT = 768


@dataclass(frozen=True)
class ServerSpec:
    name: str  # "tenor", "hf", "llama.cpp"
    argv: tuple[str, ...]  # with {port} where the port goes
    ready_path: str  # 200 once the model is loaded
    env: tuple[tuple[str, str], ...] = ()  # set over this process's environment (served_ab.py's base tree)
    cwd: str | None = None  # where it starts (default: here)


@dataclass(frozen=True)
class PeerOptions:
    gguf: Path
    threads: int = 2
    llama_slots: int = 32
    llama_server: Path | None = None  # None: $LLAMA_SERVER, then DEFAULT_LLAMA_SERVER, then PATH
    tenor_args: tuple[str, ...] = ()
    llama_args: tuple[str, ...] = ()
    tenor_as_cpu: str | None = None  # an ISA of benchmarks/cpu_proxy.py: tenor runs the code such a CPU runs

    def __post_init__(self) -> None:
        if not self.gguf.is_file():
            raise ValueError(f"no such GGUF file: {self.gguf}")
        if self.threads < 1 or self.llama_slots < 1:
            raise ValueError("threads and llama slots must be at least 1")
        if self.tenor_as_cpu is not None and self.tenor_as_cpu not in PROFILES:
            raise ValueError(f"unknown tenor_as_cpu {self.tenor_as_cpu!r}: choose from {', '.join(PROFILES)}")


def find_llama_server(explicit: Path | None) -> Path | None:
    env = os.environ.get("LLAMA_SERVER")
    on_path = shutil.which("llama-server")
    for candidate in (explicit, Path(env) if env else None, DEFAULT_LLAMA_SERVER, Path(on_path) if on_path else None):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def server_specs(names: list[str], options: PeerOptions) -> list[ServerSpec]:
    """Specs for the named servers, in order; raises ValueError for an unknown or missing one."""
    specs = []
    for name in names:
        if name == "tenor":
            entry = (
                (str(HERE / "cpu_proxy.py"), "--isa", options.tenor_as_cpu)
                if options.tenor_as_cpu
                else ("-m", "tenor.cli.main")
            )
            argv = (
                sys.executable,
                *entry,
                "serve",
                "--model",
                str(options.gguf),
                "--port",
                "{port}",
                *options.tenor_args,
            )
            specs.append(ServerSpec("tenor", argv, "/healthcheck"))
        elif name == "hf":
            argv = (
                sys.executable,
                str(HERE / "hf_server.py"),
                "--gguf",
                str(options.gguf),
                "--port",
                "{port}",
                "--threads",
                str(options.threads),
            )
            specs.append(ServerSpec("hf", argv, "/health"))
        elif name in ("llama", "llama.cpp"):
            binary = find_llama_server(options.llama_server)
            if binary is None:
                raise ValueError("no llama-server: build it (benchmarks/peers.md) or set $LLAMA_SERVER")
            ctx = options.llama_slots * LLAMA_CTX_PER_SLOT
            argv = (
                str(binary),
                "-m",
                str(options.gguf),
                "-np",
                str(options.llama_slots),
                "-t",
                str(options.threads),
                "-c",
                str(ctx),
                "--host",
                "127.0.0.1",
                "--port",
                "{port}",
                *options.llama_args,
            )
            specs.append(ServerSpec("llama.cpp", argv, "/health"))
        else:
            raise ValueError(f"unknown server {name!r}; choose from tenor, hf, llama")
    return specs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningServer:
    """A started server; `stop()` ends its whole process group (idempotent)."""

    def __init__(self, spec: ServerSpec, log_path: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.argv = [a.replace("{port}", str(self.port)) for a in spec.argv]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **dict(spec.env)},
                cwd=spec.cwd,
            )

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> None:
        deadline = time.monotonic() + timeout_s
        url = self.base_url + self.spec.ready_path
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(poll_s)
        raise RuntimeError(f"{self.spec.name} was not ready within {timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(5)

    def _signal(self, sig: signal.Signals) -> None:
        try:  # the group is ours: start_new_session made this process its leader
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

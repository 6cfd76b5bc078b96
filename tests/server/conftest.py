import re
import sys

import pytest

from tests.server.http.live import ServeProcess

GRPC_NOTE = re.compile(r"\(JetStream gRPC on ([\d.]+):(\d+)\)")


class TinyServer:
    def __init__(self, process: ServeProcess) -> None:
        self.url = process.url
        match = GRPC_NOTE.search(process.ready_line)
        assert match, process.ready_line
        self.grpc_address = f"{match.group(1)}:{match.group(2)}"


@pytest.fixture(scope="session")
def tiny_server():
    """`tenor serve` on the tiny random Llama, with JetStream's gRPC Orchestrator; killed at the end."""
    argv = [
        sys.executable,
        "-m",
        "tenor.cli.main",
        "serve",
        "--model",
        "test.TinyLlamaRandom",
        "--port",
        "0",
        "--grpc-port",
        "0",
    ]
    with ServeProcess(argv, ready_timeout_s=120) as process:
        yield TinyServer(process)

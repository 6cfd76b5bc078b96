"""A fake model server for admin tests: serves the Modelet service (no LM service, no
engine), joins the cell with the real JoinLoop, and counts every Load / Unload /
UpdateLoaded so tests can prove what was (not) reloaded."""

from __future__ import annotations

import collections
import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc

from tenor.proto import common_pb2, modelet_pb2, modelet_pb2_grpc
from tenor.server.join_loop import JoinLoop

GIB = 1 << 30


@dataclass
class FakeModel:
    config_name: str
    checkpoint: str
    overrides: dict[str, str]
    status: int = common_pb2.LOADING
    failure_reason: str = ""
    loaded_at: float = 0.0
    role: str = "both"


class FakeModelet(modelet_pb2_grpc.ModeletServicer):
    """Loads fail for `fail_configs` and for checkpoints starting with "bad"."""

    def __init__(self, fail_configs: tuple[str, ...] = (), load_delay_s: float = 0.0) -> None:
        self.fail_configs = set(fail_configs)
        self.load_delay_s = load_delay_s
        self.lock = threading.Lock()
        self.models: dict[str, FakeModel] = {}
        self.loads: collections.Counter[str] = collections.Counter()
        self.unloads: collections.Counter[str] = collections.Counter()
        self.updates: collections.Counter[str] = collections.Counter()

    def _finish_load(self, name: str, model: FakeModel, context: grpc.ServicerContext) -> None:
        time.sleep(self.load_delay_s)
        failure = ""
        if model.config_name in self.fail_configs:
            failure = f"cannot load {model.config_name}: out of fake memory"
        elif model.checkpoint.startswith("bad"):
            failure = f"checkpoint {model.checkpoint} not found"
        with self.lock:
            if failure:
                model.status, model.failure_reason = common_pb2.FAILED, failure
            else:
                model.status, model.loaded_at = common_pb2.LOADED, time.time()
        if failure:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, failure)

    def Load(self, request, context):
        with self.lock:
            current = self.models.get(request.model_name)
            if current is not None and current.status == common_pb2.LOADED:
                return modelet_pb2.LoadResponse()
            model = FakeModel(
                request.config_name, request.checkpoint, dict(request.overrides), role=request.role or "both"
            )
            self.models[request.model_name] = model
            self.loads[request.model_name] += 1
        self._finish_load(request.model_name, model, context)
        return modelet_pb2.LoadResponse()

    def UpdateLoaded(self, request, context):
        with self.lock:
            old = self.models.get(request.model_name)
            if old is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"{request.model_name} is not loaded")
            model = FakeModel(old.config_name, request.checkpoint, dict(request.overrides), role=old.role)
            self.models[request.model_name] = model
            self.updates[request.model_name] += 1
        self._finish_load(request.model_name, model, context)
        return modelet_pb2.UpdateLoadedResponse()

    def Unload(self, request, context):
        with self.lock:
            if self.models.pop(request.model_name, None) is not None:
                self.unloads[request.model_name] += 1
        return modelet_pb2.UnloadResponse()

    def GetStatus(self, request, context):
        with self.lock:
            models = [
                modelet_pb2.ModelState(
                    model_name=n,
                    config_name=m.config_name,
                    checkpoint=m.checkpoint,
                    status=m.status,
                    failure_reason=m.failure_reason,
                    queue_depth=1,
                    latency_p50_ms=12.0,
                    loaded_at=m.loaded_at,
                    role=m.role,
                )
                for n, m in sorted(self.models.items())
            ]
        return modelet_pb2.GetStatusResponse(models=models, server=modelet_pb2.ServerStats(uptime_s=1.0))

    def status_of(self, name: str) -> int:
        with self.lock:
            model = self.models.get(name)
            return common_pb2.NONE if model is None else model.status


class FakeModelServer:
    """Context manager; `kill()` stops answering at once, as a crashed process would."""

    def __init__(
        self,
        root: str,
        cell: str,
        *,
        memory_bytes: int = 8 * GIB,
        platform: str = "cpu",
        tags: tuple[str, ...] = (),
        fail_configs: tuple[str, ...] = (),
        load_delay_s: float = 0.0,
        rejoin_s: float = 0.5,
    ) -> None:
        self.modelet = FakeModelet(fail_configs, load_delay_s)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        modelet_pb2_grpc.add_ModeletServicer_to_server(self.modelet, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        spec = common_pb2.ServerSpec(platform=platform, memory_bytes=memory_bytes, tags=list(tags))
        self.join_loop = JoinLoop(root, cell, self.address, "", spec, rejoin_s=rejoin_s, check_s=0.1)
        self._alive = False

    def start(self) -> "FakeModelServer":
        self._server.start()
        self.join_loop.start()
        self._alive = True
        return self

    def kill(self) -> None:
        if self._alive:
            self._alive = False
            self.join_loop.stop()
            self._server.stop(grace=None)

    def __enter__(self) -> "FakeModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

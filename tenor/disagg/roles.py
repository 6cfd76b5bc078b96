"""What a model server adds for disaggregated serving, by role.

Every model server answers KVTransfer.Prefill (so any replica can prefill for a decode
replica). A decode replica (`prefill_targets` given) also wraps each engine it loads in a
DecodeEngine that prefills on those targets, least loaded first.
"""

from __future__ import annotations

import grpc

from tenor.disagg.decode_engine import DecodeEngine
from tenor.disagg.remote_prefill import RemotePrefill, RemotePrefillConfig
from tenor.disagg.transfer import Dial, GrpcKVTransfer, KVTransferService
from tenor.proto import kv_transfer_pb2_grpc
from tenor.server.lm_service import ModelLookup


def add_prefill_service(server: grpc.aio.Server, models: ModelLookup) -> KVTransferService:
    service = KVTransferService(models)
    kv_transfer_pb2_grpc.add_KVTransferServicer_to_server(service, server)
    return service


class DecodeRole:
    """The decode side's shared transfer and per-model wrapping."""

    def __init__(self, prefill_targets: tuple[str, ...], config: RemotePrefillConfig = RemotePrefillConfig(),
                 dial: Dial | None = None) -> None:
        if not prefill_targets:
            raise ValueError("a decode replica needs at least one prefill replica address")
        self.transfer = GrpcKVTransfer(dial=dial) if dial is not None else GrpcKVTransfer()
        self._targets = list(prefill_targets)
        self._config = config
        self.remotes: dict[str, RemotePrefill] = {}

    def wrap(self, model_key: str, engine):
        if not hasattr(engine, "held_prefix_blocks"):
            return engine  # an engine that cannot take KV blocks (a mock) prefills locally
        remote = self.remotes[model_key] = RemotePrefill(self.transfer, lambda: self._targets, self._config)
        return DecodeEngine(engine, model_key, remote, engine.kv_block_size)

    async def close(self) -> None:
        await self.transfer.close()

"""What a model server adds for disaggregated serving, by role.

Every model server answers KVTransfer.Prefill (so any replica can prefill for a decode
replica). A model loaded as "decode" (the admin's placement) is wrapped in a DecodeEngine
that prefills on the model's prefill replicas, least loaded first; `--prefill-from` wraps
every model the server loads, with fixed targets (a manual override).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc

from tenor.disagg.decode_engine import DecodeEngine
from tenor.disagg.remote_prefill import RemotePrefill, RemotePrefillConfig
from tenor.disagg.transfer import Dial, GrpcKVTransfer, KVTransferService
from tenor.errors import UserError
from tenor.proto import kv_transfer_pb2_grpc
from tenor.server.lm_service import ModelLookup


def add_prefill_service(server: grpc.aio.Server, models: ModelLookup) -> KVTransferService:
    service = KVTransferService(models)
    kv_transfer_pb2_grpc.add_KVTransferServicer_to_server(service, server)
    return service


def check_prefill_engine(model_key: str, engine) -> None:
    """A prefill replica's engine must export KV blocks, or decode replicas would only fail over."""
    if not hasattr(engine, "prefill_export"):
        raise UserError(f"{model_key}'s engine cannot export KV blocks: it cannot run as prefill")


class DecodeRole:
    """The decode side's shared transfer and per-model wrapping."""

    def __init__(self, config: RemotePrefillConfig = RemotePrefillConfig(), dial: Dial | None = None) -> None:
        self.transfer = GrpcKVTransfer(dial=dial) if dial is not None else GrpcKVTransfer()
        self._config = config
        self.remotes: dict[str, RemotePrefill] = {}

    def wrap(
        self,
        model_key: str,
        engine,
        targets: Callable[[], Sequence[str]],
        strict: bool = True,
        on_stop: Callable[[], None] | None = None,
    ):
        """`engine` as a decode replica prefilling on `targets()`. An engine that cannot take KV
        blocks (a mock) is refused when `strict` (the admin asked for a decode replica), else
        returned as it is and prefills locally."""
        if not hasattr(engine, "held_prefix_blocks"):
            if strict:
                raise UserError(f"{model_key}'s engine cannot import KV blocks: it cannot run as decode")
            return engine
        remote = self.remotes[model_key] = RemotePrefill(self.transfer, lambda: list(targets()), self._config)
        return DecodeEngine(engine, model_key, remote, engine.kv_block_size, on_stop)

    async def close(self) -> None:
        await self.transfer.close()

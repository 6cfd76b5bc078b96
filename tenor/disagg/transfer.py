"""KVTransfer: how a decode replica gets a prompt prefilled elsewhere and its KV blocks back.

`KVTransfer` is the seam; `GrpcKVTransfer` is the implementation that works across hosts: a
server-streaming RPC (PrefillService on the prefill replica) carries a typed header and then
the raw tensor bytes in bounded chunks; HTTP/2 flow control paces the sender. The receiving
side runs on its own small thread pool, beside the engine's step thread and off the event
loop, and checks sizes and checksum before anything reaches a cache. A device-to-device
implementation (NCCL / NIXL on GPUs) would implement the same `fetch`.
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from tenor.disagg.kv_blocks import KVBlocks, TransferError, decode, encode
from tenor.engine.api import (
    EngineUnavailableError,
    InvalidRequestError,
    OverloadedError,
)
from tenor.proto import kv_transfer_pb2 as pb
from tenor.proto import kv_transfer_pb2_grpc as pb_grpc
from tenor.server.lm_service import ModelLookup, ModelNotServedError

DEFAULT_MAX_TRANSFER_BYTES = 1 << 30
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 8 << 20),)

Dial = Callable[[str, Seq[tuple[str, object]]], grpc.Channel]


def _dial_insecure(target: str, options: Seq[tuple[str, object]]) -> grpc.Channel:
    return grpc.insecure_channel(target, options=options)


# A test hook: rewrites the chunk stream (corrupt, truncate, stall) on the side it is given to.
ChunkFault = Callable[[Iterator[pb.KVChunk]], Iterator[pb.KVChunk]]


@dataclass
class TransferStats:
    """Counters a metrics collector reads (bytes, outcomes, latency samples)."""

    bytes_received: int = 0
    blocks_received: int = 0
    transfers_ok: int = 0
    transfers_failed: int = 0
    in_flight: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.latency_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)  # per bucket, the last is +Inf
        self.latency_sum_s = 0.0

    def record(self, ok: bool, blocks: KVBlocks | None, seconds: float) -> None:
        with self._lock:
            if ok and blocks is not None:
                self.transfers_ok += 1
                self.bytes_received += blocks.num_bytes
                self.blocks_received += blocks.num_blocks
                self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
                self.latency_sum_s += seconds
            else:
                self.transfers_failed += 1


class KVTransfer(abc.ABC):
    """Asks the prefill replica at `target` to prefill a prompt; returns its KV blocks."""

    @abc.abstractmethod
    async def fetch(
        self, target: str, model_key: str, prompt_token_ids: Seq[int], skip_blocks: int, timeout_s: float
    ) -> KVBlocks:
        """Raises TransferError (retry elsewhere) or OverloadedError/EngineUnavailableError."""

    async def close(self) -> None:
        return None


class GrpcKVTransfer(KVTransfer):
    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_TRANSFER_BYTES,
        workers: int = 2,
        fault: ChunkFault | None = None,
        dial: Dial = _dial_insecure,
    ) -> None:
        self._max_bytes = max_bytes
        self._dial = dial  # a model server passes its CellAccess.channel: the cell token and TLS
        self._fault = fault
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="tenor-kv-transfer")
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        self.stats = TransferStats()

    def _stub(self, target: str) -> pb_grpc.KVTransferStub:
        with self._lock:
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = self._dial(target, _CHANNEL_OPTIONS)
        return pb_grpc.KVTransferStub(channel)

    async def fetch(
        self, target: str, model_key: str, prompt_token_ids: Seq[int], skip_blocks: int, timeout_s: float
    ) -> KVBlocks:
        request = pb.PrefillRequest(
            model_key=model_key, prompt_token_ids=list(prompt_token_ids), skip_blocks=skip_blocks
        )
        loop = asyncio.get_running_loop()
        call_box: list = []
        future = loop.run_in_executor(self._pool, self._fetch_sync, target, request, timeout_s, call_box)
        try:
            return await future
        except asyncio.CancelledError:  # the request went away: stop the transfer too
            if call_box:
                call_box[0].cancel()
            raise

    def _fetch_sync(self, target: str, request: pb.PrefillRequest, timeout_s: float, call_box: list) -> KVBlocks:
        start = time.monotonic()
        blocks, cancelled = None, False
        with self.stats._lock:
            self.stats.in_flight += 1
        try:
            call = self._stub(target).Prefill(request, timeout=timeout_s)
            call_box.append(call)
            chunks: Iterator[pb.KVChunk] = iter(call)
            if self._fault is not None:
                chunks = self._fault(chunks)
            blocks = decode(chunks, self._max_bytes)
            return blocks
        except grpc.RpcError as exc:
            cancelled = exc.code() == grpc.StatusCode.CANCELLED  # the request went away: not a failure
            raise _from_status(exc, target) from None
        finally:
            with self.stats._lock:
                self.stats.in_flight -= 1
            if not (blocks is None and cancelled):
                self.stats.record(blocks is not None, blocks, time.monotonic() - start)

    async def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _from_status(exc: grpc.RpcError, target: str) -> Exception:
    code, details = exc.code(), exc.details()
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return OverloadedError(f"prefill replica {target} is full: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(details or "invalid prefill request")
    if code == grpc.StatusCode.UNAVAILABLE and "prefill replica" in (details or ""):
        return EngineUnavailableError(details)
    return TransferError(f"prefill on {target} failed: {code.name}: {details}")


class KVTransferService(pb_grpc.KVTransferServicer):
    """The prefill replica's side: prefill the prompt, stream its blocks back."""

    def __init__(self, models: ModelLookup, chunk_bytes: int | None = None, fault: ChunkFault | None = None) -> None:
        self._models = models
        self._chunk_bytes = chunk_bytes
        self._fault = fault
        self.bytes_sent = 0
        self.transfers_sent = 0

    async def Prefill(self, request: pb.PrefillRequest, context: grpc.aio.ServicerContext):
        if request.skip_blocks < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"skip_blocks must be >= 0, got {request.skip_blocks}"
            )
        try:
            engine = self._models.ready(request.model_key).engine
            if not hasattr(engine, "prefill_export"):
                raise EngineUnavailableError(f"{request.model_key}'s engine cannot prefill for another server")
            blocks = await engine.prefill_export(tuple(request.prompt_token_ids), request.skip_blocks)
        except ModelNotServedError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except InvalidRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OverloadedError as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"prefill replica overloaded: {exc}")
        except EngineUnavailableError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"prefill replica unavailable: {exc}")
        chunks = encode(blocks, self._chunk_bytes) if self._chunk_bytes else encode(blocks)
        if self._fault is not None:
            chunks = self._fault(chunks)
        for chunk in chunks:
            yield chunk
        self.bytes_sent += blocks.num_bytes
        self.transfers_sent += 1

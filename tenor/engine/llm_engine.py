"""The real engine: continuous batching on a background thread behind the async contract.

The event loop (HTTP, gRPC) calls `generate`/`score`; they hand work to the step thread
through a lock-protected inbox and receive outputs on per-request asyncio queues. The step
thread loops schedule -> run -> sample -> emit, one batched forward per step. torch releases
the GIL inside its kernels, so the event loop keeps serving while a step runs.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, AsyncIterator
from typing import Sequence as Seq

import torch

from tenor.engine.api import (
    EngineLimits,
    EngineStats,
    EngineUnavailableError,
    GenerateRequest,
    HealthState,
    InvalidRequestError,
    OverloadedError,
    RequestOutput,
    RuntimeInfo,
    SamplingParams,
    Tokenizer,
)
from tenor.engine.block_manager import BlockManager
from tenor.engine.kv_handoff import export_prompt_blocks, held_prefix_blocks, import_prompt_blocks
from tenor.engine.model_loader import LoadedModel, load_model
from tenor.engine.options import EngineOptions
from tenor.engine.request_state import RequestState, post_outputs
from tenor.engine.runner import ModelRunner
from tenor.engine.sampling import sample
from tenor.engine.scheduler import Scheduler, SchedulerConfig
from tenor.engine.sequence import Sequence
from tenor.hardware import check_device_room, configure_threads, cpu_info, device_name
from tenor.memory import default_kv_cache_bytes, kv_bytes_per_token
from tenor.models.layers import PagedKVCache
from tenor.registry import ServableConfig

if TYPE_CHECKING:
    from tenor.dist.leader import GroupLeader

log = logging.getLogger(__name__)
GIL_SWITCH_INTERVAL_S = 0.0005  # see start()

BLOCK_SIZE = 16
STUCK_AFTER_S = 30.0
_request_ids = itertools.count()


class LLMEngine:
    def __init__(self, servable: ServableConfig, checkpoint: str | None, options: EngineOptions) -> None:
        self.servable = servable
        self.model_name = servable.name
        self.limits = EngineLimits(servable.max_prefill_predict_length, servable.max_target_length)
        self.tokenizer: Tokenizer = None  # type: ignore[assignment]  # set once loaded, before any request
        self._checkpoint = checkpoint
        self._options = options
        self._state = HealthState.LOADING
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._inbox: list[RequestState] = []
        self._aborts: list[str] = []
        self._requests: dict[str, RequestState] = {}  # owned by the step thread
        self._in_flight = 0  # requests accepted and not yet finished (any thread, under _lock)
        self._thread: threading.Thread | None = None
        self._running = True  # the step thread loops until stop() clears it
        self._last_progress = time.monotonic()
        self._prompt_tokens = 0
        self._generated_tokens = 0
        self._group: GroupLeader | None = None  # when leading a model-server group
        self._runtime: RuntimeInfo | None = None

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        # All torch work (load, KV allocation, steps) happens on the one step thread: every
        # thread that calls into torch gets its own OpenMP team, and two teams spinning on
        # two cores made each step twice as slow.
        loop = asyncio.get_running_loop()
        loaded: asyncio.Future = loop.create_future()
        # The step thread wakes the event loop once a step; the loop's thread then holds the GIL
        # through its batch of HTTP writes, up to the switch interval, while the step thread waits
        # to start the next step. 0.5 ms instead of 5: +4-6 % output tok/s served at 32 streams
        # (three interleaved pairs on a 2-core Zen 5; 0.2 ms was slower again).
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self._thread = threading.Thread(
            target=self._run, args=(loop, loaded), daemon=True, name=f"tenor-engine-{self.model_name}"
        )
        self._thread.start()
        await loaded
        if self._options.warmup:
            await self._warmup()
        # What exists now (weights' Python objects, tokenizer tables, modules) lives as long as
        # the server: keep it out of the collector, whose full passes stalled steps by 0.1-0.2 s.
        gc.collect()
        gc.freeze()
        self._state = HealthState.READY

    def _setup(self, loaded: LoadedModel, threads: int) -> None:
        cfg = loaded.config
        cpu, precision = cpu_info(), loaded.precision
        self.tokenizer = loaded.tokenizer
        self._vocab_size = cfg.vocab_size
        self._eos = tuple(sorted(set(cfg.eos_token_ids) | set(loaded.tokenizer.eos_token_ids)))
        kv_heads = loaded.cache_kv_heads or cfg.num_kv_heads  # a group rank caches only its heads
        kv_dtype = str(loaded.dtype)
        if precision.kv_dtype and not self._options.quantize_kv_cache:  # an int8 cache's scales: the model dtype
            kv_dtype = precision.kv_dtype
        kv_store = getattr(torch, kv_dtype.removeprefix("torch."))
        self._runtime = RuntimeInfo(
            cpu.model_name,
            cpu.isa,
            threads,
            precision.dtype,
            precision.weights,
            precision.reason,
            device_name(precision.device),
            "int8" if self._options.quantize_kv_cache else kv_dtype.removeprefix("torch."),
        )
        per_slot = (
            kv_bytes_per_token(cfg, kv_dtype, self._options.quantize_kv_cache) // cfg.num_kv_heads * kv_heads
        )  # linear in the KV heads
        budget = self._options.kv_cache_bytes or default_kv_cache_bytes(
            self.servable.max_batch_size, self.servable.max_target_length, per_slot
        )
        num_blocks = max(budget // (per_slot * BLOCK_SIZE), 1)
        if num_blocks * BLOCK_SIZE < self.servable.max_target_length:
            raise ValueError(
                f"the KV cache budget ({budget} bytes) holds {num_blocks * BLOCK_SIZE} tokens, fewer than "
                f"max_target_length ({self.servable.max_target_length})"
            )
        self.kv_cache_bytes = num_blocks * BLOCK_SIZE * per_slot
        check_device_room(precision.device, self.kv_cache_bytes)
        cache = PagedKVCache(
            cfg.num_layers,
            num_blocks,
            BLOCK_SIZE,
            kv_heads,
            cfg.head_dim,
            loaded.dtype,
            quantized=self._options.quantize_kv_cache,
            device=precision.device,
            kv_dtype=kv_store,
        )
        self._group = loaded.group
        if self._group is not None:
            self._group.allocate_cache(num_blocks, BLOCK_SIZE, self._options.quantize_kv_cache, kv_store)
        self._blocks = BlockManager(num_blocks, BLOCK_SIZE)
        batched = max(self._options.max_num_batched_tokens, self.servable.max_batch_size)
        self._scheduler = Scheduler(SchedulerConfig(self.servable.max_batch_size, batched), self._blocks)
        self._runner = ModelRunner(loaded.model, cache)

    async def _warmup(self) -> None:
        prompt = tuple(range(3, 3 + min(16, self.limits.max_prefill_predict_length)))
        request = GenerateRequest("warmup", prompt, SamplingParams(max_tokens=2, ignore_eos=True))
        async for _ in self._submit(request, check=False):
            pass

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        if self._state is HealthState.STOPPED:
            return
        self._state = HealthState.STOPPED
        deadline = time.monotonic() + drain_timeout_s
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        with self._lock:
            self._aborts.extend(self._requests.keys())
            self._aborts.extend(r.key for r in self._inbox)
        self._wake.set()
        await asyncio.sleep(0.05)
        self._running = False
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    def health(self) -> HealthState:
        if self._group is not None and self._group.broken:
            return HealthState.DEGRADED
        if self._state is HealthState.READY:
            if self._thread is None or not self._thread.is_alive():
                return HealthState.STUCK
            if self._in_flight and time.monotonic() - self._last_progress > STUCK_AFTER_S:
                return HealthState.STUCK
        return self._state

    def stats(self) -> EngineStats:
        sched = getattr(self, "_scheduler", None)
        blocks = getattr(self, "_blocks", None)
        return EngineStats(
            num_running=len(sched.running) if sched else 0,
            num_waiting=len(sched.waiting) + len(self._inbox) if sched else 0,
            kv_cache_usage=blocks.usage if blocks else 0.0,
            prefix_cache_queries=blocks.prefix_queries if blocks else 0,
            prefix_cache_hits=blocks.prefix_hits if blocks else 0,
            num_preemptions=sched.num_preemptions if sched else 0,
            prompt_tokens_total=self._prompt_tokens,
            generation_tokens_total=self._generated_tokens,
            runtime=self._runtime,
        )

    # ---- requests --------------------------------------------------------------------
    def generate(self, request: GenerateRequest, incoming_kv=None) -> AsyncIterator[RequestOutput]:
        """`incoming_kv`: the prompt's blocks prefilled elsewhere (a KVBlocks), imported first."""
        return self._submit(request, check=True, incoming_kv=incoming_kv)

    def _submit(self, request: GenerateRequest, check: bool, incoming_kv=None) -> AsyncIterator[RequestOutput]:
        if check:
            self._admit_check(len(request.prompt_token_ids), request.sampling)
            self._check_token_ids(request.prompt_token_ids)
        state = RequestState(
            request, asyncio.get_running_loop(), self.tokenizer, self._eos, self.limits.max_target_length
        )
        state.incoming_kv = incoming_kv
        self._enqueue(state)
        return self._stream(state)

    # ---- disaggregated serving -------------------------------------------------------
    def check_admission(self, request: GenerateRequest) -> None:
        """What `generate` checks before queueing (state, limits, bounded queue, token ids), so a
        decode replica can refuse a request before asking a prefill replica for its blocks."""
        self._admit_check(len(request.prompt_token_ids), request.sampling)
        self._check_token_ids(request.prompt_token_ids)

    @property
    def kv_block_size(self) -> int:
        return self._blocks.block_size

    def held_prefix_blocks(self, prompt_token_ids: Seq[int]) -> int:
        """Leading full prompt blocks in this engine's prefix cache: a prefill server skips them."""
        return held_prefix_blocks(self._blocks, prompt_token_ids)

    async def prefill_export(self, prompt_token_ids: Seq[int], skip_blocks: int = 0):
        """Prefills the prompt alone and returns its full KV blocks from `skip_blocks` on (a
        KVBlocks); the blocks stay pinned by the request until copied out, then are freed."""
        self._admit_check(len(prompt_token_ids), SamplingParams(max_tokens=1))
        self._check_token_ids(prompt_token_ids)
        request = GenerateRequest(
            f"prefill-{next(_request_ids)}", tuple(prompt_token_ids), SamplingParams(max_tokens=1, ignore_eos=True)
        )
        state = RequestState(
            request, asyncio.get_running_loop(), self.tokenizer, self._eos, self.limits.max_target_length
        )
        state.export_skip_blocks = skip_blocks
        self._enqueue(state)
        async for _ in self._stream(state):
            pass
        if state.exported is None:
            raise EngineUnavailableError("the prefill was aborted before its KV blocks were exported")
        return state.exported

    def _admit_check(self, num_prompt_tokens: int, sampling: SamplingParams) -> None:
        if self.health() is HealthState.DEGRADED:
            raise EngineUnavailableError("engine is degraded: a rank of its model-server group is missing")
        if self._state is not HealthState.READY:
            raise EngineUnavailableError(f"engine is {self._state.value}")
        self.limits.check(num_prompt_tokens, sampling)
        with self._lock:
            if self._in_flight >= self.servable.max_batch_size + self._options.max_waiting:
                raise OverloadedError(
                    f"server overloaded: {self._in_flight} requests in flight "
                    f"({self.servable.max_batch_size} running + {self._options.max_waiting} waiting max)"
                )

    def _check_token_ids(self, token_ids: Seq[int]) -> None:
        bad = [t for t in token_ids if not 0 <= t < self._vocab_size]
        if bad:
            raise InvalidRequestError(
                f"token id {bad[0]} is out of range: this model's vocabulary has {self._vocab_size} tokens"
            )

    def _enqueue(self, state: RequestState) -> None:
        with self._lock:
            self._in_flight += 1
            self._inbox.append(state)
        self._wake.set()

    async def _stream(self, state: RequestState) -> AsyncIterator[RequestOutput]:
        finished = False
        try:
            while True:
                item = await state.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:  # the caller went away: free its slots and KV now
                with self._lock:
                    self._aborts.append(state.key)
                self._wake.set()

    async def score(self, prefix_token_ids: Seq[int], suffix_token_ids: Seq[int]) -> float:
        return float(sum(await self.token_logprobs(prefix_token_ids, suffix_token_ids)))

    async def token_logprobs(self, prefix_token_ids: Seq[int], suffix_token_ids: Seq[int]) -> tuple[float, ...]:
        prefix = list(prefix_token_ids)
        if not prefix:
            bos = self.tokenizer.bos_token_id
            if bos is None:
                raise InvalidRequestError("the prefix is empty and the model has no BOS token to score from")
            prefix = [bos]
        if not suffix_token_ids:
            raise InvalidRequestError("the suffix is empty")
        self._check_token_ids(prefix)
        self._check_token_ids(suffix_token_ids)
        total = len(prefix) + len(suffix_token_ids)
        self._admit_check(min(total, self.limits.max_prefill_predict_length), SamplingParams(max_tokens=1))
        self.limits.check_score(len(prefix), len(suffix_token_ids))
        request = GenerateRequest(
            f"score-{next(_request_ids)}", tuple(prefix) + tuple(suffix_token_ids), SamplingParams(max_tokens=1)
        )
        state = RequestState(
            request,
            asyncio.get_running_loop(),
            self.tokenizer,
            self._eos,
            self.limits.max_target_length,
            score_from=len(prefix),
        )
        self._enqueue(state)
        async for _ in self._stream(state):
            pass
        assert state.score is not None  # the stream ends only after finish_score (or raises)
        return state.score_logprobs

    # ---- the step thread -------------------------------------------------------------
    def _run(self, loop: asyncio.AbstractEventLoop, loaded: asyncio.Future) -> None:
        try:
            threads = configure_threads()
            self._setup(load_model(self.servable, self._checkpoint, self._options.group, self._options.device), threads)
        except BaseException as exc:  # reported to start()'s caller
            loop.call_soon_threadsafe(_settle, loaded, exc)
            return
        loop.call_soon_threadsafe(_settle, loaded, None)
        try:
            self._loop()
        finally:
            if self._group is not None:  # the workers drop their shard; the group's owner stops them
                self._group.unload()

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while self._running:
            self._drain_inbox()
            if not self._scheduler.has_work():
                self._last_progress = time.monotonic()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                self._step()
            except Exception as exc:  # a bug or OOM: fail the step's requests, keep serving
                if self._group is None or not self._group.broken:  # a broken group logged itself
                    log.exception("engine step failed")
                self._fail_all(exc)
            self._last_progress = time.monotonic()

    def _drain_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
        for state in inbox:
            self._requests[state.key] = state
            if state.incoming_kv is not None:
                self._import_kv(state)
            for seq in state.seqs:
                self._scheduler.add(seq)
            self._prompt_tokens += len(state.request.prompt_token_ids)
        for request_id in aborts:
            aborted = self._requests.get(request_id)
            if aborted is not None:
                aborted.abort()
                self._retire(aborted)

    def _step(self) -> None:
        plan = self._scheduler.schedule()
        if not plan.chunks:
            self._wake.wait(0.01)
            return
        out = self._runner.run(plan)
        self._scheduler.commit(plan)
        touched: dict[str, RequestState] = {}
        sample_rows: list[int] = []
        sample_seqs: list[Sequence] = []
        for seq, rows in group_rows(out.rows).items():
            state = self._requests[seq.request_id]
            touched[state.key] = state
            if seq.score_from is None:
                sample_rows.append(rows[-1])
                sample_seqs.append(seq)
                continue
            targets = torch.tensor([seq.token_ids[out.rows[r][1] + 1] for r in rows])
            logprobs = torch.log_softmax(out.logits[rows], dim=-1)
            seq.score_logprobs.extend(logprobs.gather(1, targets[:, None])[:, 0].tolist())
            if seq.num_computed == len(seq.token_ids):
                state.finish_score(seq)
        if sample_seqs:
            states = [self._requests[seq.request_id] for seq in sample_seqs]
            every_row = sample_rows == list(range(len(out.logits)))  # a decode step's: no copy
            picks = sample(
                out.logits if every_row else out.logits[sample_rows],
                [seq.sampling for seq in sample_seqs],
                [st.generator(seq) for st, seq in zip(states, sample_seqs)],
            )
            for state, seq, pick in zip(states, sample_seqs, picks):
                self._generated_tokens += 1
                if state.add_token(seq, pick):
                    if state.export_skip_blocks is not None:
                        state.exported = export_prompt_blocks(self._runner.cache, seq, state.export_skip_blocks)
                    self._scheduler.finish(seq)
        outputs = []
        for state in touched.values():
            if state.finished:  # retire first, so stats never count a request already answered
                self._retire(state)
            output = state.take_output()
            if output is not None:
                outputs.append((state, output))
        post_outputs(outputs)

    def _retire(self, state: RequestState) -> None:
        for seq in state.seqs:
            self._scheduler.finish(seq)
        self._blocks.release(state.pinned_blocks)
        state.pinned_blocks = []
        self._requests.pop(state.key, None)
        with self._lock:
            self._in_flight -= 1

    def _import_kv(self, state: RequestState) -> None:
        incoming, state.incoming_kv = state.incoming_kv, None
        assert incoming is not None  # the caller checks
        try:
            state.pinned_blocks = import_prompt_blocks(
                self._blocks, self._runner.cache, state.request.prompt_token_ids, incoming
            )
        except ValueError as exc:  # unusable blocks: compute the prompt here instead
            log.warning("discarding received KV blocks: %s", exc)

    def _fail_all(self, exc: Exception) -> None:
        for state in list(self._requests.values()):
            state.fail(EngineUnavailableError(f"engine step failed: {exc}"))
            self._retire(state)


def _settle(future: asyncio.Future, exc: BaseException | None) -> None:
    if not future.done():
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)


def group_rows(rows: list[tuple[Sequence, int]]) -> dict[Sequence, list[int]]:
    grouped: dict[Sequence, list[int]] = {}
    for i, (seq, _) in enumerate(rows):
        grouped.setdefault(seq, []).append(i)
    return grouped

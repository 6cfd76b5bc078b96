"""A worker rank (1..N-1) of a model-server group: joins the group, loads the shard the leader
asks for, and runs the forward of every step plan it receives, until STOP.

It exits when the leader dies (the next collective fails at once on a closed connection, or
within the group timeout when the leader hangs), so no orphan is left behind.

    python -m tenor.dist.worker --group-size 2 --group-rank 1 --group-leader 127.0.0.1:29500
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

import torch

from tenor.dist import messages
from tenor.dist.group import Group, GroupError
from tenor.dist.leader import RankModel, load_rank_model, servable_from_json
from tenor.dist.messages import Kind
from tenor.dist.spec import GroupSpec
from tenor.models.layers import PagedKVCache

log = logging.getLogger(__name__)


class WorkerLoop:
    def __init__(self, group: Group) -> None:
        self.group = group
        self.ranked: RankModel | None = None
        self.cache: PagedKVCache | None = None
        self.steps = 0

    def run(self) -> None:
        torch.set_grad_enabled(False)
        with torch.inference_mode():
            while True:
                kind, payload = messages.receive(self.group)
                if kind is Kind.STOP:
                    return
                if kind is Kind.LOAD:
                    self._load(messages.decode_json(payload))
                elif kind is Kind.CACHE:
                    self._allocate(*payload.tolist())
                elif kind is Kind.STEP:
                    self._step(payload)
                elif kind is Kind.UNLOAD:
                    self.ranked, self.cache = None, None

    def _load(self, document: dict) -> None:
        self.ranked, self.cache = None, None
        servable = servable_from_json(document["servable"])
        self.ranked = load_rank_model(
            self.group, servable, document.get("checkpoint"), document["dtype"], document["weights"]
        )
        self.group.wait_all("loading the model")

    def _allocate(self, num_blocks: int, block_size: int, quantized: int, kv_dtype: int) -> None:
        assert self.ranked is not None, "CACHE before LOAD"
        local = self.ranked.model.local.config
        self.cache = PagedKVCache(
            local.num_layers,
            num_blocks,
            block_size,
            local.num_kv_heads,
            local.head_dim,
            self.ranked.dtype,
            quantized=bool(quantized),
            device=self.group.spec.device,
            kv_dtype=messages.KV_DTYPES[kv_dtype],
        )

    def _step(self, payload: torch.Tensor) -> None:
        assert self.ranked is not None and self.cache is not None, "STEP before LOAD and CACHE"
        step = messages.decode_step(payload, self.cache.num_kv_heads)
        step.batch.native = self.ranked.model.native_kernels  # this rank's own kernels
        device = self.cache.device
        self.ranked.model(
            step.input_ids.to(device),
            step.positions.to(device),
            self.cache,
            step.batch.to(device),
            step.logits_rows.to(device),
        )
        self.steps += 1


def serve_worker(spec: GroupSpec, threads: int | None = None) -> int:
    """Runs a worker until the leader stops it (0) or is lost (1)."""
    if threads:
        torch.set_num_threads(threads)
    group = Group(spec)
    try:
        WorkerLoop(group).run()
        return 0
    except Exception as exc:  # the leader died or hung, or a load failed: say so and exit
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"tenor: worker rank {spec.rank}: leaving the group: {first[:300]}", file=sys.stderr)
        return 1
    finally:
        group.close()


def watch_parent(interval_s: float = 0.5) -> None:
    """Exit this process as soon as its parent is gone (it is then re-parented)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="tenor-parent-watch").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tenor.dist.worker")
    parser.add_argument("--group-size", type=int, required=True)
    parser.add_argument("--group-rank", type=int, required=True)
    parser.add_argument("--group-leader", required=True, help="HOST:PORT of rank 0")
    parser.add_argument("--group-timeout", type=float, default=10.0)
    parser.add_argument("--join-timeout", type=float, default=300.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the starting process goes (local groups: no orphans, even mid-load)",
    )
    args = parser.parse_args(argv)
    if args.exit_with_parent:
        watch_parent()
    from tenor.dist.spec import parse_leader

    try:
        host, port = parse_leader(args.group_leader)
        spec = GroupSpec(
            args.group_size, args.group_rank, host, port, args.group_timeout, args.join_timeout, args.device
        )
        if spec.is_leader:
            raise ValueError("rank 0 is the leader; a worker has rank 1..N-1")
    except ValueError as exc:
        print(f"tenor: error: {exc}", file=sys.stderr)
        return 2
    try:
        return serve_worker(spec, args.threads)
    except GroupError as exc:
        print(f"tenor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

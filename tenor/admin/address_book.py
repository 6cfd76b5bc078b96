"""Each published model's set of serving addresses, with waiting for changes (WatchLoc,
WaitForReady). Lives in the admin's event loop; sets are small, so one Condition does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Callable


class ModelGone(Exception):
    """The model was unpublished while someone waited on it."""


class BookClosed(Exception):
    """The admin stopped leading; waiters must go and find the new one."""


@dataclass(frozen=True)
class AddressSet:
    seqno: int
    addresses: tuple[str, ...]  # replicas that take client requests (roles "both" and "decode")
    prefill: tuple[str, ...] = ()  # prefill replicas: only the model's decode replicas call them


class AddressBook:
    """`settled` False holds back watchers: an admin that just took over has not heard from the
    model servers yet, and telling clients "no replicas" would make them drop good addresses."""

    def __init__(self, settled: bool = True) -> None:
        self._sets: dict[str, AddressSet] = {}
        self._changed = asyncio.Condition()
        self._closed = False
        self._settled = settled
        self._wakers: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    def get(self, model: str) -> AddressSet | None:
        return self._sets.get(model)

    def add_model(self, model: str) -> None:
        if model not in self._sets:
            self._sets[model] = AddressSet(0, ())
            self._notify()

    def set(self, model: str, addresses: tuple[str, ...], prefill: tuple[str, ...] = ()) -> None:
        current = self._sets.get(model)
        if current is not None and (current.addresses, current.prefill) != (addresses, prefill):
            self._sets[model] = AddressSet(current.seqno + 1, addresses, prefill)
            self._notify()

    def remove_model(self, model: str) -> None:
        if self._sets.pop(model, None) is not None:
            self._notify()

    def settle(self) -> None:
        if not self._settled:
            self._settled = True
            self._notify()

    def poke(self) -> None:
        """Wakes waiters whose condition depends on more than addresses (load failures)."""
        self._notify()

    def close(self) -> None:
        self._closed = True
        self._notify()

    def _notify(self) -> None:
        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = asyncio.get_running_loop().create_task(wake())
        self._wakers.add(task)
        task.add_done_callback(self._wakers.discard)

    def _check(self, model: str) -> AddressSet:
        if self._closed:
            raise BookClosed("this admin is no longer the leader")
        current = self._sets.get(model)
        if current is None:
            raise ModelGone(f"model {model} is not published")
        return current

    async def wait_change(self, model: str, seen: int | None) -> AddressSet:
        """Returns the model's set once settled and its seqno differs from `seen` (any seqno if
        `seen` is None)."""
        async with self._changed:
            while True:
                current = self._check(model)
                if self._settled and (seen is None or current.seqno != seen):
                    return current
                await self._changed.wait()

    async def wait_for(self, model: str, predicate: Callable[[AddressSet], bool]) -> AddressSet:
        """Waits until predicate(set) is true; predicate may raise to stop waiting."""
        async with self._changed:
            while True:
                current = self._check(model)
                if predicate(current):
                    return current
                await self._changed.wait()

    async def watch(self, model: str) -> AsyncIterator[AddressSet]:
        seen = None
        while True:
            current = await self.wait_change(model, seen)
            seen = current.seqno
            yield current

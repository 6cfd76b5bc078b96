"""The address book: watchers see a model's replica set change, and a book that is not yet
settled (a new leader before servers re-join) tells them nothing rather than "no replicas"."""

from __future__ import annotations

import asyncio

import pytest

from tenor.admin.address_book import AddressBook, BookClosed, ModelGone


async def _first(book: AddressBook, model: str, timeout_s: float = 0.2):
    return await asyncio.wait_for(book.wait_change(model, None), timeout_s)


def test_watch_sees_the_latest_set_after_each_change():
    async def scenario():
        book = AddressBook()
        book.add_model("m")
        watch = book.watch("m")
        seen = [await asyncio.wait_for(anext(watch), 1)]
        book.set("m", ("a:1",))
        seen.append(await asyncio.wait_for(anext(watch), 1))
        book.set("m", ("a:1",))  # unchanged: no new seqno
        book.set("m", ("a:1", "b:2"))
        book.set("m", ("b:2",))  # two changes before the watcher looks: it sees the latest
        seen.append(await asyncio.wait_for(anext(watch), 1))
        return [(s.seqno, s.addresses) for s in seen]

    assert asyncio.run(scenario()) == [(0, ()), (1, ("a:1",)), (3, ("b:2",))]


def test_unsettled_book_holds_watchers_until_settled():
    async def scenario():
        book = AddressBook(settled=False)
        book.add_model("m")
        with pytest.raises(TimeoutError):
            await _first(book, "m")
        waiter = asyncio.create_task(_first(book, "m", timeout_s=2))
        book.set("m", ("a:1",))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        book.settle()
        return await waiter

    assert asyncio.run(scenario()).addresses == ("a:1",)


def test_unpublish_and_close_end_waits_with_reasons():
    async def scenario():
        book = AddressBook()
        book.add_model("m")
        book.remove_model("m")
        with pytest.raises(ModelGone):
            await _first(book, "m")
        book.add_model("n")
        book.close()
        with pytest.raises(BookClosed):
            await _first(book, "n")

    asyncio.run(scenario())

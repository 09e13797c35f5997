"""The search index's follower (backends/sqlite_index_follower.py): its work is done inside the
next append's transaction, or by itself when no append comes, and a failure of that work never
costs the append."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.backends.sqlite import SQLiteStorage
from agentjournal.backends.sqlite_index_follower import Handoff
from agentjournal.backends.sqlite_search import Gathered


class Offer(threading.Thread):
    """`handoff.run(work, ...)` on a thread of its own, as the follower calls it; unless told
    otherwise, the follower doing the work itself records it and reports 7 events."""

    def __init__(
        self, handoff: Handoff[Any], work: Any, do_itself: Callable[[Any], int] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.handoff, self.work = handoff, work
        self.done_itself: list[Any] = []
        self.result: int | None = -1
        self._do_itself = do_itself or self.record

    def run(self) -> None:
        self.result = self.handoff.run(self.work, self._do_itself)

    def record(self, work: Any) -> int:
        self.done_itself.append(work)
        return 7


def offered(
    handoff: Handoff[Any], work: Any, do_itself: Callable[[Any], int] | None = None
) -> Offer:
    """An `Offer` started and seen pending, so the next `take` finds it."""
    offer = Offer(handoff, work, do_itself)
    offer.start()
    deadline = time.monotonic() + 30
    while not handoff.pending:
        assert time.monotonic() < deadline, "never offered"
        time.sleep(0.001)
    return offer


def test_work_taken_by_a_committing_writer_is_not_done_again() -> None:
    handoff: Handoff[str] = Handoff(patience=60)
    offer = offered(handoff, "batch")
    assert handoff.take() == "batch"
    assert handoff.take() is None  # one writer takes it
    assert not handoff.pending
    handoff.finish(3)
    offer.join(30)
    assert (offer.result, offer.done_itself) == (3, [])


def test_work_whose_commit_failed_reports_none() -> None:
    handoff: Handoff[str] = Handoff(patience=60)
    offer = offered(handoff, "batch")
    assert handoff.take() == "batch"
    handoff.finish(None)
    offer.join(30)
    assert (offer.result, offer.done_itself) == (None, [])


def test_work_no_writer_takes_is_done_by_the_follower_itself() -> None:
    handoff: Handoff[str] = Handoff(patience=0.01)
    offer = Offer(handoff, "batch")
    offer.start()
    offer.join(30)
    assert (offer.result, offer.done_itself) == (7, ["batch"])
    assert handoff.take() is None  # taken back: no writer finds it later


def test_an_append_stores_the_followers_batch_in_its_own_transaction(db_path: Path) -> None:
    storage = SQLiteStorage(db_path)
    search = storage._search
    assert search is not None
    search.handoff.patience = 60
    with Journal(storage) as journal:
        sid = journal.create_session("handed over").session_id
        first = journal.append(sid, "user_message", {"content": "kittiwake"})
        gathered = search.gather(storage._reader(), 10)
        assert gathered is not None
        offer = offered(search.handoff, gathered, pytest.fail)
        journal.append(sid, "assistant_message", {"content": "noted"})
        offer.join(30)
        assert not search.handoff.pending
        upto = storage._read("SELECT indexed_upto FROM search_state")[0][0]
        assert upto == first.event_id  # stored with the append, before any search
        assert journal.verify().ok


def test_index_work_that_fails_leaves_the_append_committed(db_path: Path) -> None:
    storage = SQLiteStorage(db_path)
    search = storage._search
    assert search is not None
    search.handoff.patience = 60
    with Journal(storage) as journal:
        sid = journal.create_session("failing index").session_id
        first = journal.append(sid, "user_message", {"content": "fulmar"})
        # A row FTS5 refuses (a rowid that is not an integer): the savepoint undoes it.
        broken = Gathered(0, [1, first.event_id], [("not a rowid", "fulmar")])  # type: ignore[list-item]
        offer = offered(search.handoff, broken, pytest.fail)
        second = journal.append(sid, "assistant_message", {"content": "petrel"})
        offer.join(30)
        assert offer.result is None
        assert [e.seq for e in journal.events(sid)][-1] == second.seq
        assert storage._read("SELECT indexed_upto FROM search_state")[0][0] == 0
        assert [h.seq for h in journal.search("fulmar").hits] == [first.seq]
        assert journal.verify().ok

"""Every `Journal.open` of one database in a process (a SQLite file, a PostgreSQL URL) shares one
storage (one writer, one group commit), and the last `close` closes it; `shared=False` is a
storage of the caller's own."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from agentjournal import AsyncJournal, Journal, StorageError
from agentjournal.backends.urls import POSTGRES_DATABASES, SQLITE_FILES, open_storage
from helpers.private import private_journal
from postgres_fixtures import fresh_schema, require_postgres, url_for


def holders(path: Path, durability: str = "full") -> int:
    return SQLITE_FILES.holders((os.path.realpath(path), durability))


def test_opens_of_one_file_share_its_writer_until_the_last_closes(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first = Journal.open(path)
    second = Journal.open(str(path))
    # The same file by another spelling of its path is the same file.
    third = Journal.open(f"sqlite:///{tmp_path}/../{tmp_path.name}/agent.db")
    assert first.storage is second.storage is third.storage
    assert holders(path) == 3
    sid = first.create_session("shared").session_id
    first.close()
    first.close()  # a second close lets go of nothing more
    assert holders(path) == 2
    second.append(sid, "user_message", {"content": "still open"})
    second.close()
    third.append(sid, "assistant_message", {"content": "and here"})
    assert [e.seq for e in third.events(sid)] == [1, 2, 3]
    third.close()
    assert holders(path) == 0
    with pytest.raises(StorageError, match="closed"):
        third.append(sid, "user_message", {"content": "after the last close"})
    with Journal.open(path) as again:
        assert again.storage is not third.storage
        assert again.get_session(sid).last_seq == 3


def test_a_tenant_view_holds_nothing_and_each_durability_has_its_own(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    with Journal.open(path) as full, Journal.open(path, durability="normal") as normal:
        assert full.storage is not normal.storage
        view = full.for_tenant("acme")
        view.close()
        assert holders(path) == 1
        assert holders(path, "normal") == 1
        view = Journal.open(path, tenant="acme")
        assert view.storage is full.storage
        view.close()
        full.create_session("still open")


def _open_in_child(path: str, parent_storage_id: int, out: multiprocessing.Queue[bool]) -> None:
    with Journal.open(path) as journal:
        journal.create_session("child")
        out.put(id(journal.storage) != parent_storage_id)


def test_a_forked_child_opens_the_file_anew(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    with Journal.open(path) as parent:
        context = multiprocessing.get_context("fork")
        out: multiprocessing.Queue[bool] = context.Queue()
        child = context.Process(target=_open_in_child, args=(str(path), id(parent.storage), out))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0
        assert out.get(timeout=5) is True
        assert [s.title for s in parent.sessions()] == ["child"]


def test_a_file_replaced_meanwhile_gets_a_storage_of_its_own(tmp_path: Path) -> None:
    """A restore puts another file at the path: an open after it reads that file, while a
    journal still open on the old one keeps its own until it closes."""
    path, other = tmp_path / "agent.db", tmp_path / "other.db"
    with Journal.open(other) as elsewhere:
        elsewhere.create_session("from the other file")
    old = Journal.open(path)
    old.create_session("from the first file")
    os.replace(other, path)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Journal.open(path) as new:
        assert new.storage is not old.storage
        assert [s.title for s in new.sessions()] == ["from the other file"]
        assert holders(path) == 1
        old.close()
        assert [s.title for s in new.sessions()] == ["from the other file"]
        assert holders(path) == 1
    assert holders(path) == 0


def test_a_private_storage_is_its_openers_alone(tmp_path: Path) -> None:
    """`shared=False` (what tests of two writers in one process use): a storage of its own,
    neither counted nor handed to a later `open`, closed by its own release."""
    path = tmp_path / "agent.db"
    with Journal.open(path) as shared, private_journal(path) as private:
        assert private.storage is not shared.storage
        assert holders(path) == 1
        sid = private.create_session("written by the private one").session_id
        assert shared.get_session(sid).last_seq == 1
    assert holders(path) == 0
    storage, release = open_storage(path, "full", shared=False)
    release()
    with pytest.raises(StorageError, match="closed"):
        storage.session("default", sid)


def test_async_opens_share_the_storage_too(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"

    async def run() -> None:
        first = await AsyncJournal.open(path)
        second = await AsyncJournal.open(path, tenant="acme")
        assert first.journal.storage is second.journal.storage
        assert holders(path) == 2
        await first.close()
        await second.create_session("after the first closed")
        await second.close()
        assert holders(path) == 0

    asyncio.run(run())


def test_opens_of_one_postgresql_url_share_its_pool() -> None:
    """PostgreSQL: keyed by the URL as written (its options are part of it) and the durability;
    tenants are views of the one storage; the last close closes the pool."""
    require_postgres()
    with fresh_schema() as schema:
        url = url_for(schema)
        first = Journal.open(url)
        second = Journal.open(url, tenant="acme")
        assert first.storage is second.storage
        assert POSTGRES_DATABASES.holders((url, "full")) == 2
        with (
            Journal.open(url, durability="normal") as normal,
            Journal.open(url_for(schema, pool_size="2")) as smaller,
            private_journal(url) as private,
        ):
            assert len({id(j.storage) for j in (first, normal, smaller, private)}) == 4
        sid = first.create_session("default's").session_id
        first.close()
        assert POSTGRES_DATABASES.holders((url, "full")) == 1
        assert second.sessions() == [], "acme sees none of default's sessions"
        second.create_session("acme's")
        second.close()
        assert POSTGRES_DATABASES.holders((url, "full")) == 0
        with pytest.raises(StorageError):
            second.get_session(sid)
        with Journal.open(url) as again:
            assert again.storage is not first.storage
            assert [s.title for s in again.sessions()] == ["default's"]


def test_first_opens_at_once_from_threads_make_one_storage(tmp_path: Path) -> None:
    """Eight threads open a file nobody has opened, released together: one storage is made
    (under the registry's lock) and all eight hold it; their appends all land."""
    path = tmp_path / "agent.db"
    barrier = threading.Barrier(8)
    opened: list[Journal] = []
    errors: list[BaseException] = []

    def open_() -> None:
        try:
            barrier.wait(30)
            opened.append(Journal.open(path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len({id(journal.storage) for journal in opened}) == 1
    assert holders(path) == 8
    for n, journal in enumerate(opened):
        journal.create_session(f"opener {n}")
        journal.close()
    assert holders(path) == 0
    with Journal.open(path) as journal:
        assert len(journal.sessions(limit=100)) == 8

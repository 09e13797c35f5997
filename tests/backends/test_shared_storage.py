"""Every `Journal.open` of one SQLite file in a process shares one storage (one writer, one group
commit), and the last `close` closes it."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from agentjournal import Journal, StorageError
from agentjournal.backends.urls import SQLITE_FILES


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

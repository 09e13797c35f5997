"""SQLite operations on a live file: the WAL limit (backends/sqlite_wal.py) and online backup and
restore (backends/sqlite_backup.py)."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from agentjournal import Conflict, InvalidArgument, Journal, NewEvent, StorageError
from agentjournal.backends.sqlite import SQLiteStorage
from agentjournal.backends.sqlite_backup import backup, restore

LIMIT = 256 * 1024


def wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def big_batch(count: int) -> list[NewEvent]:
    return [NewEvent("user_message", {"content": f"{n:06d} " + "x" * 400}) for n in range(count)]


@pytest.mark.parametrize("limit", [LIMIT, None])
def test_a_large_transaction_leaves_no_large_wal(tmp_path: Path, limit: int | None) -> None:
    path = tmp_path / "big.db"
    with Journal(SQLiteStorage(path, wal_limit_bytes=limit)) as journal:
        sid = journal.create_session("import-sized").session_id
        journal.append_many(sid, big_batch(2000))  # ~1 MB in one commit
        if limit is None:  # the baseline: the file keeps its high-water mark
            assert wal_size(path) > 4 * LIMIT
        else:
            assert wal_size(path) <= LIMIT
        assert journal.verify().ok


def test_the_wal_comes_back_under_the_limit_after_a_long_reader_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    storage = SQLiteStorage(path, wal_limit_bytes=LIMIT)
    with Journal(storage) as journal:
        sid = journal.create_session("held").session_id
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # holds this snapshot
        for _ in range(6):
            journal.append_many(sid, big_batch(200))
        # No checkpoint can pass a reader's snapshot: the WAL had to grow, and the writer
        # noticed and backed off instead of waiting on every commit.
        assert wal_size(path) > LIMIT
        assert storage.wal is not None
        assert storage.wal.stats.busy >= 1
        reader.execute("COMMIT")
        reader.close()
        deadline = time.monotonic() + 60
        while wal_size(path) > LIMIT and time.monotonic() < deadline:
            journal.append(sid, "user_message", {"content": "after"})
            time.sleep(0.05)
        assert wal_size(path) <= LIMIT
        assert storage.wal.stats.checkpoints >= 1
        assert journal.verify().ok


def test_readers_that_overlap_do_not_keep_the_wal_from_coming_back(tmp_path: Path) -> None:
    # Each reader begins again the moment it ends, so one is always reading: SQLite's own
    # checkpoint never finds a moment to rewind the WAL, and a reader can retake the lock a
    # TRUNCATE checkpoint is waiting for (bench/wal_bench.py, "overlapping reads").
    path = tmp_path / "overlapped.db"
    storage = SQLiteStorage(path, wal_limit_bytes=LIMIT)
    stop = threading.Event()

    def read(slot: int) -> None:
        stop.wait(slot * 0.01)
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            while not stop.is_set():
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM events").fetchone()
                stop.wait(0.02)
                conn.execute("COMMIT")

    with Journal(storage) as journal:
        sid = journal.create_session("overlapped").session_id
        readers = [threading.Thread(target=read, args=(n,)) for n in range(2)]
        for thread in readers:
            thread.start()
        sizes = []
        try:
            for _ in range(200):
                journal.append_many(sid, big_batch(100))  # ~50 KB a commit
                sizes.append(wal_size(path))
        finally:
            stop.set()
            for thread in readers:
                thread.join()
        assert storage.wal is not None
        assert storage.wal.stats.checkpoints >= 5
        assert max(sizes) <= 2 * LIMIT, sizes
        assert journal.verify().ok


def test_a_bad_wal_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="wal_limit_bytes"):
        SQLiteStorage(tmp_path / "x.db", wal_limit_bytes=0)


def test_backup_while_appending_is_a_consistent_copy(tmp_path: Path) -> None:
    source, copy = tmp_path / "live.db", tmp_path / "copy.db"
    with Journal.open(source) as journal:
        sid = journal.create_session("busy").session_id
        stop = threading.Event()
        written = [0]

        def append_until_stopped() -> None:
            while not stop.is_set():
                journal.append_many(sid, big_batch(20))
                written[0] += 20

        writer = threading.Thread(target=append_until_stopped)
        writer.start()
        try:
            while written[0] < 200:
                time.sleep(0.01)
            report = backup(source, copy)
            at_backup = written[0]
        finally:
            stop.set()
            writer.join()
        total = journal.get_session(sid).last_seq

    assert report.sessions == 1
    assert 200 < report.events <= total
    assert report.events % 20 == 1  # whole batches only, plus session_created
    assert not Path(f"{copy}-wal").exists()  # the copy is one self-contained file
    with Journal.open(copy) as restored:
        assert restored.verify().ok
        assert restored.get_session(sid).last_seq == report.events
    assert at_backup > 0


def test_backup_refuses_to_overwrite_and_to_copy_onto_itself(tmp_path: Path) -> None:
    source, copy = tmp_path / "a.db", tmp_path / "b.db"
    Journal.open(source).close()
    copy.write_text("precious")
    with pytest.raises(Conflict, match="exists"):
        backup(source, copy)
    assert copy.read_text() == "precious"
    with pytest.raises(InvalidArgument, match="another file"):
        backup(source, source, overwrite=True)
    with pytest.raises(InvalidArgument, match="no database"):
        backup(tmp_path / "missing.db", tmp_path / "c.db")
    assert not (tmp_path / "missing.db").exists()


def test_backup_of_a_file_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InvalidArgument, match="not an agentjournal database"):
        backup(other, tmp_path / "copy.db")
    (tmp_path / "garbage.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StorageError, match="not a readable SQLite database"):
        backup(tmp_path / "garbage.db", tmp_path / "copy2.db")
    assert not (tmp_path / "copy.db").exists()
    assert not (tmp_path / "copy2.db").exists()


def test_restore_replaces_only_when_forced(tmp_path: Path) -> None:
    original, copy, target = tmp_path / "a.db", tmp_path / "a.bak", tmp_path / "t.db"
    with Journal.open(original) as journal:
        kept = journal.create_session("kept").session_id
    backup(original, copy)
    with Journal.open(target) as journal:
        other = journal.create_session("would be lost").session_id

    with pytest.raises(Conflict, match="holds 1 events"):
        restore(copy, target)
    with Journal.open(target) as journal:
        assert [s.session_id for s in journal.sessions()] == [other]

    report = restore(copy, target, force=True)
    assert (report.events, report.sessions) == (1, 1)
    with Journal.open(target) as journal:
        assert [s.session_id for s in journal.sessions()] == [kept]
        assert journal.verify().ok


def test_restore_into_a_journal_that_is_open_is_seen_by_it(tmp_path: Path) -> None:
    original, copy, target = tmp_path / "a.db", tmp_path / "a.bak", tmp_path / "t.db"
    with Journal.open(original) as journal:
        kept = journal.create_session("kept").session_id
    backup(original, copy)
    with Journal.open(target) as live:
        live.create_session("replaced")
        restore(copy, target, force=True)
        assert [s.session_id for s in live.sessions()] == [kept]
        live.append(kept, "user_message", {"content": "after the restore"})
        assert live.verify().ok


def test_restore_refuses_a_file_that_is_not_a_journal(tmp_path: Path) -> None:
    target = tmp_path / "t.db"
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InvalidArgument, match="not an agentjournal database"):
        restore(other, target)
    assert not target.exists()
    data = tmp_path / "data.db"
    sqlite3.connect(data).execute("CREATE TABLE mine (x)").connection.close()
    journal_file = tmp_path / "j.db"
    Journal.open(journal_file).close()
    with pytest.raises(Conflict, match="not a journal"):
        restore(journal_file, data)

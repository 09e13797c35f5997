"""The writers' lock file (backends/sqlite_lock.py): held around every write transaction, waited
for in the kernel, and never left behind by a writer that failed or died."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Conflict, Journal, StorageError
from agentjournal.backends.group_commit import GroupCommit
from agentjournal.backends.sqlite import SQLiteStorage
from agentjournal.backends.sqlite_lock import WriterLock
from agentjournal.backends.sqlite_write import Control

WAIT = 30.0  # bound on every wait; never an expected duration

# Another process's writer, reduced to its hold on the lock file: it takes the lock, says so, and
# lets go when its stdin closes (or when it is killed).
HOLD_LOCK_FILE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def other_process_holding(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK_FILE, str(lock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=WAIT)
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


def lock_is_free(lock_path: Path) -> bool:
    """Whether another descriptor (as another process would) gets the lock at once."""
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def append_in_thread(journal: Journal, sid: str) -> threading.Thread:
    thread = threading.Thread(
        target=journal.append, args=(sid, "user_message", {"content": "waited"}), daemon=True
    )
    thread.start()
    return thread


@pytest.mark.parametrize("holder_ends", ["releases", "is killed"])
def test_a_writer_waits_for_the_lock_file_and_goes_on_once_it_is_free(
    tmp_path: Path, holder_ends: str
) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as journal:
        sid = journal.create_session("s").session_id
        with other_process_holding(Path(f"{path}-lock")) as holder:
            writer = append_in_thread(journal, sid)
            writer.join(timeout=0.5)
            # Without the lock file the append takes milliseconds; with it, it cannot finish.
            assert writer.is_alive()
            assert [e.type for e in journal.events(sid)] == ["session_created"]
            if holder_ends == "releases":
                assert holder.stdin is not None
                holder.stdin.close()
            else:
                holder.send_signal(signal.SIGKILL)
            writer.join(timeout=WAIT)
            assert not writer.is_alive()
        assert [e.type for e in journal.events(sid)] == ["session_created", "user_message"]
        assert journal.verify().ok


def test_the_lock_file_is_free_after_every_write_that_ends(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    lock_path = Path(f"{path}-lock")
    with Journal.open(path) as journal:
        assert lock_is_free(lock_path)
        sid = journal.create_session("s").session_id
        assert lock_is_free(lock_path)
        journal.append(sid, "tool_call", {"call_id": "c1", "name": "f", "arguments": "{}"})
        assert lock_is_free(lock_path)
        with pytest.raises(Conflict):  # refused by the rules, inside the transaction
            journal.append(sid, "tool_call", {"call_id": "c1", "name": "f", "arguments": "{}"})
        assert lock_is_free(lock_path)
        with pytest.raises(Conflict):  # one bad event in a batch: nothing of it is written
            journal.append_many(
                sid,
                [
                    {"type": "tool_result", "payload": {"call_id": "c1", "content": "ok"}},
                    {"type": "tool_result", "payload": {"call_id": "c1", "content": "twice"}},
                ],
            )
        assert lock_is_free(lock_path)
        assert [e.type for e in journal.events(sid)] == ["session_created", "tool_call"]


def test_two_storages_of_one_process_on_one_file_take_turns(tmp_path: Path) -> None:
    """`Journal.open` shares one storage per file and process; storages made directly (a
    benchmark's, say) each have a writer, and take turns on the lock file."""
    path = tmp_path / "journal.db"
    with Journal(SQLiteStorage(path)) as first, Journal(SQLiteStorage(path)) as second:
        assert first.storage is not second.storage
        sid = first.create_session("s").session_id

        def write(journal: Journal, tag: str) -> None:
            for n in range(50):
                journal.append(sid, "user_message", {"content": f"{tag} {n}"})

        threads = [
            threading.Thread(target=write, args=(journal, tag))
            for journal, tag in ((first, "a"), (second, "b"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive()
        events = second.events(sid, limit=1000)
        assert [e.seq for e in events] == list(range(1, 102))
        for tag in "ab":
            mine = [e.payload["content"] for e in events if e.payload.get("content", "")[:1] == tag]
            assert mine == [f"{tag} {n}" for n in range(50)]
        assert first.verify().ok


def test_the_lock_file_is_held_from_begin_to_commit(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    storage = SQLiteStorage(path)
    try:
        inside = storage.write(lambda tx: not lock_is_free(Path(f"{path}-lock")))
        assert inside
        assert lock_is_free(Path(f"{path}-lock"))
    finally:
        storage.close()


class FailingConnection:
    """The writer connection, with one statement made to fail: before it runs ("raise"), or
    after rolling the transaction back ("rolled back"), as SQLite does on some errors."""

    def __init__(self, conn: sqlite3.Connection, fail: dict[str, str]) -> None:
        self.conn = conn
        self.fail = fail

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        how = self.fail.get(sql)
        if how == "rolled back":
            self.conn.execute("ROLLBACK")
        if how is not None:
            raise sqlite3.OperationalError(f"{sql} failed (injected)")
        return self.conn.execute(sql, *args)


@pytest.mark.parametrize(
    ("fail", "work_raises"),
    [
        ({}, False),
        ({}, True),
        ({"BEGIN IMMEDIATE": "raise"}, False),
        ({"COMMIT": "raise"}, False),
        ({"COMMIT": "rolled back"}, False),
        ({"COMMIT": "raise", "ROLLBACK": "raise"}, False),
        ({"ROLLBACK": "raise"}, True),
    ],
    ids=[
        "commits",
        "work raises",
        "BEGIN fails",
        "COMMIT fails",
        "COMMIT fails and rolls back",
        "COMMIT and ROLLBACK fail",
        "work raises and ROLLBACK fails",
    ],
)
def test_every_way_a_transaction_ends_lets_the_lock_file_go(
    tmp_path: Path, fail: dict[str, str], work_raises: bool
) -> None:
    path = tmp_path / "plain.db"
    with closing(sqlite3.connect(path, isolation_level=None, check_same_thread=False)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
        lock = WriterLock(str(path))
        control = Control(FailingConnection(conn, fail), lock)  # type: ignore[arg-type]
        group = GroupCommit(control, lambda: None)
        seen_inside: list[bool] = []

        def work(tx: object) -> str:
            seen_inside.append(lock_is_free(Path(f"{path}-lock")))
            conn.execute("INSERT INTO t VALUES (1)")
            if work_raises:
                raise ValueError("refused")
            return "done"

        try:
            outcome: object = group.submit(work)
        except (ValueError, StorageError, sqlite3.Error) as exc:
            outcome = exc
        if conn.in_transaction:  # left open only where ROLLBACK itself failed
            conn.execute("ROLLBACK")
        assert lock_is_free(Path(f"{path}-lock"))
        assert seen_inside in ([], [False])  # held while the work ran
        written = conn.execute("SELECT count(*) FROM t").fetchone()[0]
        assert (outcome == "done") == (written == 1), (outcome, written)
        lock.close()


# A writer mid-write that has forked a child: killed, it must not leave its hold to the child.
FORK_THEN_HOLD = """
import os, sys, time
from agentjournal.backends.sqlite import SQLiteStorage
storage = SQLiteStorage(sys.argv[1])
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    os.read(read_end, 1)  # lives until the test lets it go
    os._exit(0)
print(child, flush=True)
def hold(tx):
    print("held", flush=True)
    time.sleep(60)
storage.write(hold)
"""


def test_a_killed_writer_leaves_no_hold_behind_in_a_child_it_forked(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    Journal.open(path).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", FORK_THEN_HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    child = int(writer.stdout.readline())
    try:
        assert writer.stdout.readline() == "held\n"
        assert not lock_is_free(Path(f"{path}-lock"))
        writer.kill()
        writer.wait(timeout=WAIT)
        os.kill(child, 0)  # the child still lives
        assert lock_is_free(Path(f"{path}-lock"))
    finally:
        writer.kill()
        writer.wait(timeout=WAIT)
        writer.stdout.close()
        os.kill(child, signal.SIGKILL)

"""The writers' lock file (backends/sqlite_lock.py): held around every write transaction, waited
for in the kernel, and never left behind by a writer that failed or died."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentjournal import Conflict, Journal

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


def test_two_journals_of_one_process_on_one_file_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal.open(path) as first, Journal.open(path) as second:
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

"""`JournalSession` (the OpenAI Agents SDK's `Session`) under concurrent writers and under
SIGKILL, on real SQLite files: asyncio tasks of one process and separate processes adding batches
to shared and private sessions lose nothing, store nothing twice and keep each writer's order
and each batch whole; a writer SIGKILLed over and over in the middle of its `add_items` loses no
acknowledged batch and never leaves part of one. Afterwards `verify()` is clean every time.

The writer processes run tests/helpers/agents_session_writer.py, which also builds the items (a
user message and an assistant message with an id; a user message, a function call and its
output), so that both sides agree on them. A crash test failure prints its seed; rerun with
AGENTJOURNAL_CRASH_SEED=<seed> to repeat its kill points.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("agents")

from agentjournal import AsyncJournal, Journal
from agentjournal.integrations.openai_agents import JournalSession

HELPER = Path(__file__).parent.parent / "helpers" / "agents_session_writer.py"
WAIT = 60.0  # seconds: the most any single step may take before the test fails instead of hanging
BATCHES = 25  # batches of 2 items each writer adds in the concurrency tests
SHARED = "support-shared"
KILLS = 20

Items = list[dict[str, Any]]


def load_helper() -> ModuleType:
    """The writer script as a module, for its item builders (`turn_items`, `crash_batch`)."""
    spec = importlib.util.spec_from_file_location("agents_session_writer", HELPER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = load_helper()


def key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


def check_items(items: list[Any], expected: dict[str, list[Items]], *, complete: bool) -> None:
    """`items` (what `get_items` returned) are the batches of the writers in `expected`, exactly:
    nothing twice, nothing else, each batch whole with its items adjacent, each writer's batches
    in the order it added them. `complete`: every batch; otherwise (a read while the writers are
    still adding) a first part of each writer's batches."""
    keys = [key(item) for item in items]
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"items returned more than once: {twice[:3]}"
    position = {k: index for index, k in enumerate(keys)}
    accounted = 0
    for name, batches in expected.items():
        where = [[position.get(key(item)) for item in batch] for batch in batches]
        present = sum(batch[0] is not None for batch in where)
        if complete:
            assert present == len(batches), f"{name}: {present} of {len(batches)} batches"
        added, missing = where[:present], where[present:]
        assert all(p is None for batch in missing for p in batch), (
            f"{name}: a batch is stored, an earlier one is not (or not whole): {where}"
        )
        for number, batch in enumerate(added):
            assert None not in batch, f"{name}: batch {number} is stored partly: {batch}"
            first = batch[0]
            assert batch == list(range(first, first + len(batch))), (
                f"{name}: batch {number} is not stored as one block: {batch}"
            )
        flat = [p for batch in added for p in batch]
        assert flat == sorted(flat), f"{name}: batches out of the order they were added"
        accounted += len(flat)
    assert accounted == len(items), "get_items returned items nobody added"


def stored_items(path: str, session_ids: set[str]) -> dict[str, list[Any]]:
    """Each session's items, read by a fresh JournalSession; and `verify()` must be clean."""
    with Journal.open(path) as journal:
        report = journal.verify()
        assert report.ok, report.to_dict()
        return {sid: asyncio.run(JournalSession(sid, journal).get_items()) for sid in session_ids}


# -- concurrent writers -----------------------------------------------------------------------


def test_asyncio_tasks_of_one_process_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """Eight asyncio tasks add 25 two-item batches each, four of them to one shared session and
    four to a session of their own, through every kind of handle at once: an `AsyncJournal` and
    a `Journal` shared by several tasks (meeting in group commit) and a `JournalSession.open`
    each (their own connections, meeting at SQLite's write lock). No call raises; every item is
    returned exactly once, each task's in its order, each batch as one block; reads of the shared
    session while the tasks write see only whole batches; `verify()` is clean."""
    path = str(tmp_path / "agent.db")
    sessions = {f"task{i}": SHARED if i < 4 else f"own-{i}" for i in range(8)}
    expected = {name: [writer.turn_items(name, n) for n in range(BATCHES)] for name in sessions}

    async def write(name: str, session: JournalSession) -> None:
        for n in range(BATCHES):
            await session.add_items(writer.turn_items(name, n))

    async def read_while_writing(done: asyncio.Event) -> int:
        """Read the shared session over and over until the writers are done; each read must be
        whole batches, a first part of each writer's."""
        reads = 0
        shared = {name: expected[name] for name, sid in sessions.items() if sid == SHARED}
        async with JournalSession.open(path, SHARED) as reader:
            while not done.is_set():
                check_items(await reader.get_items(), shared, complete=False)
                reads += 1
        return reads

    async def main() -> tuple[list[BaseException | None], int]:
        async with await AsyncJournal.open(path) as async_journal:
            with Journal.open(path) as journal:
                handles: list[JournalSession] = []
                for index, sid in enumerate(sessions.values()):
                    if index % 3 == 0:
                        handles.append(JournalSession(sid, async_journal))
                    elif index % 3 == 1:
                        handles.append(JournalSession(sid, journal))
                    else:
                        handles.append(JournalSession.open(path, sid))
                done = asyncio.Event()
                reader = asyncio.create_task(read_while_writing(done))
                try:
                    writes = asyncio.gather(
                        *(write(name, h) for name, h in zip(sessions, handles, strict=True)),
                        return_exceptions=True,
                    )
                    results = await asyncio.wait_for(writes, WAIT)
                finally:
                    done.set()
                    reads = await asyncio.wait_for(reader, WAIT)
                    for handle in handles:
                        handle.close()
        return results, reads

    results, reads = asyncio.run(main())
    errors = [f"{name}: {r!r}" for name, r in zip(sessions, results, strict=True) if r is not None]
    assert not errors, errors
    assert reads >= 1

    found = stored_items(path, set(sessions.values()))
    for sid in set(sessions.values()):
        writers = {name: expected[name] for name, s in sessions.items() if s == sid}
        check_items(found[sid], writers, complete=True)


def test_processes_released_together_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """Four processes, each with its own `JournalSession.open` on one file, released at once by
    a line on stdin (so their first writes, and the creation of the session two of them share,
    race), add 25 two-item batches each: two to one shared session, two to their own. No call
    raises ("database is locked" included) and no process writes to stderr; every item is
    returned exactly once, each process's in its order, each batch as one block; `verify()` is
    clean."""
    path = str(tmp_path / "agent.db")
    sessions = {"proc0": SHARED, "proc1": SHARED, "proc2": "own-2", "proc3": "own-3"}
    procs: list[subprocess.Popen[str]] = []
    try:
        for name, sid in sessions.items():
            with (tmp_path / f"{name}.stderr").open("w") as stderr:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(HELPER), "race", path, sid, name, str(BATCHES)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                        encoding="utf-8",
                    )
                )
        for proc, name in zip(procs, sessions, strict=True):
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n", stderr_of(tmp_path, name)
        for proc in procs:  # every process is waiting on its stdin: release them together
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc, name in zip(procs, sessions, strict=True):
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.close()
            output = proc.stdout.read()
            assert proc.wait(WAIT) == 0, stderr_of(tmp_path, name)
            reports.append(json.loads(output))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    assert [r["errors"] for r in reports] == [[]] * len(sessions)
    assert [stderr_of(tmp_path, name) for name in sessions] == [""] * len(sessions)
    assert [(r["writer"], r["added"]) for r in reports] == [(n, BATCHES) for n in sessions]
    found = stored_items(path, set(sessions.values()))
    for sid in set(sessions.values()):
        writers = {
            name: [writer.turn_items(name, n) for n in range(BATCHES)]
            for name, s in sessions.items()
            if s == sid
        }
        check_items(found[sid], writers, complete=True)


def stderr_of(logs: Path, name: str) -> str:
    return (logs / f"{name}.stderr").read_text(encoding="utf-8")[-2000:]


# -- SIGKILL ----------------------------------------------------------------------------------


class CrashServer:
    """The helper in `crash` mode: forks one writer per `run`, reports what it acknowledged."""

    def __init__(self, path: str, session_id: str, logs: Path) -> None:
        self.stderr_path = logs / "crash-server.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(HELPER), "crash", path, session_id],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                encoding="utf-8",
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.writer_pid: int | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self) -> str:
        line = self.lines.get(timeout=WAIT)
        assert line is not None, f"the crash server ended: {self.stderr()}"
        assert not line.startswith("error"), f"{line}\n{self.stderr()}"
        return line

    def run(self, acks: int, delay: float) -> tuple[int, list[int]]:
        """Fork a writer, SIGKILL it `delay` seconds after its `acks`-th acknowledgement; return
        the last batch it found stored when it started, and every batch it acknowledged."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        started, pid, found = self.line().split()
        assert started == "started", started
        self.writer_pid = int(pid)
        acked: list[int] = []
        while len(acked) < acks:
            acked.append(self.ack(self.line()))
        time.sleep(delay)  # not a synchronisation: where in its next add_items the kill lands
        os.kill(self.writer_pid, signal.SIGKILL)  # unreaped until the server sees it die
        while (line := self.line()) != f"exited {pid} {-signal.SIGKILL}":
            acked.append(self.ack(line))  # what it acknowledged before the kill reached it
        self.writer_pid = None
        return int(found), acked

    @staticmethod
    def ack(line: str) -> int:
        word, number = line.split()
        assert word == "acked", line
        return int(number)

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")[-2000:]

    def close(self) -> None:
        if self.writer_pid is not None:
            os.kill(self.writer_pid, signal.SIGKILL)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()  # the server ends at the end of its stdin
        try:
            self.proc.wait(WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(WAIT)
            self.reader.join(WAIT)
            self.proc.stdout.close()


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_batch_and_leaves_none_in_part(tmp_path: Path) -> None:
    """A writer adds three-item batches (a user message, a function call, its output) in a loop,
    printing "acked <n>" as each `add_items` returns, and is SIGKILLed at a random point 20
    times over on the same file, each new writer continuing the session after the last batch it
    finds. After every kill: every acknowledged batch is there exactly once and in order, the
    batch in flight is there whole or not at all, so `get_items` is batches 1..n exactly (no
    duplicate, no part of one) and every function call is a completed tool call; `verify()` is
    clean."""
    seed = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    path = str(tmp_path / "agent.db")
    session_id = "user-42"
    stored = 0
    acked_total = 0
    server = CrashServer(path, session_id, tmp_path)
    try:
        for kill in range(KILLS):
            delay = rng.choice([0.0, rng.uniform(0.0, 0.02)])
            found, acked = server.run(rng.randint(1, 30), delay)
            context = f"seed {seed}, kill {kill + 1}"
            assert found == stored, f"{context}: the writer continued after batch {found}"
            assert acked == list(range(stored + 1, stored + 1 + len(acked))), context
            acked_total += len(acked)

            with Journal.open(path) as journal:
                report = journal.verify()
                items = asyncio.run(JournalSession(session_id, journal).get_items())
                calls = journal.tool_calls(session_id)
            assert report.ok, f"{context}: {report.to_dict()}"
            keys = [key(item) for item in items]
            assert len(keys) == len(set(keys)), f"{context}: get_items has duplicates"
            assert len(items) % 3 == 0, f"{context}: a batch is stored in part: {items[-3:]}"
            now = len(items) // 3
            assert acked[-1] <= now <= acked[-1] + 1, (
                f"{context}: acknowledged up to batch {acked[-1]}, {now} stored"
            )
            assert items == [item for n in range(1, now + 1) for item in writer.crash_batch(n)], (
                f"{context}: the stored batches are not batches 1..{now}, each once, in order"
            )
            assert [(c.call_id, c.status) for c in calls] == [
                (f"call_{n:06d}", "ok") for n in range(1, now + 1)
            ], context
            stored = now
    finally:
        server.close()
    assert acked_total >= KILLS
    assert server.stderr() == "", "a writer or the server complained"

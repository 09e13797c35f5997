"""`append_event` writes the ADK event and the `app:` and `user:` state it changes in one
transaction, on both backends: a writer SIGKILLed over and over in the middle of its appends
never leaves the shared state behind (or ahead of) the stored events; an append refused for any
one of the sessions it writes (the ADK session, the app's state, the user's state) writes
nothing at all; writers of one app state in other sessions lose none of each other's changes.

A crash test failure prints its seed; rerun with AGENTJOURNAL_CRASH_SEED=<seed> to repeat its
kill points.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.events import Event, EventActions
from google.adk.sessions import Session
from google.genai import types

from agentjournal import InvalidEvent, Journal, PayloadTooLarge, SessionNotFound
from agentjournal.integrations.adk import JournalSessionService
from agentjournal.integrations.adk_events import journal_id
from postgres_fixtures import POOL_RANDOM

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

HELPER = Path(__file__).parent.parent / "helpers" / "adk_crash_writer.py"
WAIT = 60.0  # seconds: the most any single step may take before the test fails instead of hanging
KILLS = 12
APP, USER = "shop", "u"


def load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("adk_crash_writer", HELPER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = load_helper()


def event(text: str, *, at: float, **delta: Any) -> Event:
    return Event(
        author="user",
        invocation_id="inv-1",
        timestamp=at,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )


def folded(events: list[Event], prefix: str) -> dict[str, Any]:
    """The state of one scope the events' deltas give, folded in order as ADK folds them."""
    state: dict[str, Any] = {}
    for e in events:
        for key, value in (e.actions.state_delta or {}).items():
            if key.startswith(prefix):
                state[key.removeprefix(prefix)] = value
    return state


def shared_events(journal: Journal) -> int:
    """How many events the app's and the user's state sessions hold (0 for one not made)."""
    total = 0
    for jid in (journal_id("app", APP), journal_id("user", APP, USER)):
        with contextlib.suppress(SessionNotFound):
            total += journal.get_session(jid).last_seq
    return total


# -- nothing written --------------------------------------------------------------------------


def every_event(journal: Journal) -> list[Any]:
    """Every event of every session, read session by session: on PostgreSQL the tenant's feed
    (`events_all`) shows an event only once every older transaction on the server has ended,
    so two reads of it a moment apart may differ with nothing written."""
    sessions = journal.sessions(limit=1000)
    return [e for s in sessions for e in journal.events(s.session_id, limit=10_000)]


def test_an_append_refused_for_any_one_session_writes_nothing_at_all(journal_url: str) -> None:
    """The ADK event refused (a NUL), the app's new state too large for a payload, the user's
    new state too large: each time nothing is written anywhere (the session, the app's state,
    the user's state), and the session object stays current."""
    limit = 4096
    with Journal.open(journal_url, max_payload_bytes=limit) as journal:
        service = JournalSessionService(journal)
        # The app's and the user's state each hold ~45% of a payload; another ~60% in one delta
        # makes an event that fits and a shared state that does not.
        big, more = "x" * (limit * 45 // 100), "y" * (limit * 60 // 100)

        async def go() -> None:
            s = await service.create_session(app_name=APP, user_id=USER, session_id="s")
            await service.append_event(s, event("one", at=1.0, k=1, **{"app:big": big}))
            await service.append_event(s, event("two", at=1.5, **{"user:big": big}))
            before = (
                await service.get_session(app_name=APP, user_id=USER, session_id="s"),
                await service.get_user_state(app_name=APP, user_id=USER),
                shared_events(journal),
                every_event(journal),
            )
            refused: list[tuple[type[Exception], Event]] = [
                # the ADK event itself: a NUL
                (InvalidEvent, event("nul \x00", at=2.0, k=2, **{"app:a": 1, "user:u": 1})),
                # the event fits, the app's state with it does not
                (PayloadTooLarge, event("two", at=2.0, k=2, **{"app:more": more, "user:u": 1})),
                # the event fits, the user's state with it does not
                (PayloadTooLarge, event("two", at=2.0, k=2, **{"app:a": 1, "user:more": more})),
            ]
            for error, bad in refused:
                with pytest.raises(error):
                    await service.append_event(s, bad)
                after = (
                    await service.get_session(app_name=APP, user_id=USER, session_id="s"),
                    await service.get_user_state(app_name=APP, user_id=USER),
                    shared_events(journal),
                    every_event(journal),
                )
                assert after == before
            # Still current: nothing was written.
            await service.append_event(s, event("fine", at=3.0, k=3, **{"app:a": 2}))
            got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
            assert got is not None
            assert got.state == {"k": 3, "app:big": big, "app:a": 2, "user:big": big}

        asyncio.run(go())


def test_writers_of_one_app_state_in_other_sessions_lose_no_change(journal_url: str) -> None:
    """Four services on their own journal handles append to four sessions at once, each event
    adding a key of its own to the app's state and to its user's: every key is there, and the
    app's state is the fold of every stored event's `app:` delta."""
    per_writer = 15
    journals = [Journal.open(journal_url) for _ in range(4)]
    try:
        services = [JournalSessionService(j) for j in journals]

        async def write(index: int) -> None:
            service = services[index]
            s = await service.create_session(app_name=APP, user_id=USER, session_id=f"s{index}")
            for n in range(per_writer):
                delta = {f"app:w{index}n{n}": n, f"user:w{index}n{n}": n, "n": n}
                await service.append_event(s, event(f"{index}/{n}", at=float(n), **delta))

        async def go() -> dict[str, Any]:
            await asyncio.gather(*(write(i) for i in range(4)))
            return await services[0].get_user_state(app_name=APP, user_id=USER)

        user_state = asyncio.run(go())
        expected = {f"w{i}n{n}": n for i in range(4) for n in range(per_writer)}
        assert user_state == expected
        got = asyncio.run(services[0].get_session(app_name=APP, user_id=USER, session_id="s0"))
        assert got is not None
        assert {k: v for k, v in got.state.items() if k.startswith("app:")} == {
            f"app:{k}": v for k, v in expected.items()
        }
        assert journals[0].verify().ok
    finally:
        for j in journals:
            j.close()


# -- SIGKILL ----------------------------------------------------------------------------------


class CrashServer:
    """The helper: forks one writer per `run`, reports what it acknowledged."""

    def __init__(self, url: str, logs: Path) -> None:
        self.stderr_path = logs / "adk-crash-server.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(HELPER), url],
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
        the newest event it found stored when it started, and every event it acknowledged."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        started, pid, found = self.line().split()
        assert started == "started", started
        self.writer_pid = int(pid)
        acked: list[int] = []
        while len(acked) < acks:
            acked.append(self.ack(self.line()))
        time.sleep(delay)  # not a synchronisation: where in its next append the kill lands
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


def stored(url: str) -> tuple[list[Event], list[Session], dict[str, Any]]:
    """Every stored event of both sessions in the order they were appended (their numbers), the
    sessions as `get_session` gives them, and the user's state; `verify()` must be clean."""
    with Journal.open(url) as journal:
        report = journal.verify()
        assert report.ok, report.to_dict()
        service = JournalSessionService(journal)

        async def read() -> tuple[list[Session], dict[str, Any]]:
            sessions = []
            for sid in writer.SESSIONS:
                got = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
                assert got is not None
                sessions.append(got)
            return sessions, await service.get_user_state(app_name=APP, user_id=USER)

        sessions, user_state = asyncio.run(read())
    events = sorted((e for s in sessions for e in s.events), key=writer.number)
    return events, sessions, user_state


def test_sigkill_never_leaves_the_shared_state_apart_from_the_events(
    journal_url: str, tmp_path: Path
) -> None:
    """A writer appends events that change the session's, the app's and the user's state,
    alternating between two sessions, and is SIGKILLed at a random point 12 times over. After
    every kill: the events stored are 1..n, each once, every acknowledged one among them; the
    app's and the user's state (as `get_session` and `get_user_state` give them) are exactly the
    fold of the stored events' `app:` and `user:` deltas, and each session's own state the fold
    of its events; `verify()` is clean."""
    seed = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    now = 0
    acked_total = 0
    server = CrashServer(journal_url, tmp_path)
    try:
        for kill in range(KILLS):
            delay = rng.choice([0.0, rng.uniform(0.0, 0.01)])
            found, acked = server.run(rng.randint(1, 12), delay)
            context = f"seed {seed}, kill {kill + 1}"
            assert found == now, f"{context}: the writer continued after event {found}"
            assert acked == list(range(now + 1, now + 1 + len(acked))), context
            acked_total += len(acked)

            events, sessions, user_state = stored(journal_url)
            now = len(events)
            assert [writer.number(e) for e in events] == list(range(1, now + 1)), context
            assert acked[-1] <= now <= acked[-1] + 1, (
                f"{context}: acknowledged up to event {acked[-1]}, {now} stored"
            )
            app, user = folded(events, "app:"), folded(events, "user:")
            assert user_state == user, f"{context}: the user's state is not its events' fold"
            for s in sessions:
                shared = {k: v for k, v in s.state.items() if ":" in k}
                own = {k: v for k, v in s.state.items() if ":" not in k}
                assert shared == {
                    **{f"app:{k}": v for k, v in app.items()},
                    **{f"user:{k}": v for k, v in user.items()},
                }, f"{context}: {s.id}'s shared state is not the events' fold"
                assert own == {k: v for k, v in folded(s.events, "").items() if ":" not in k}, (
                    context
                )
    finally:
        server.close()
    assert acked_total >= KILLS
    assert server.stderr() == "", "a writer or the server complained"

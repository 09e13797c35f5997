"""`Journal.hold_turn`: a running turn is never taken for a cut one, by another thread or (on
PostgreSQL) by another instance; a holder that dies lets go with its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from agentjournal import Journal
from agentjournal.errors import Conflict
from agentjournal.runtime import Agent, ScriptedModel, resume_incomplete


def test_a_held_turn_is_not_held_twice_and_is_free_after(journal: Journal) -> None:
    session = journal.create_session("t").session_id
    with journal.hold_turn(session) as first:
        assert first
        with journal.hold_turn(session) as second:
            assert not second
        other = journal.create_session("u").session_id
        with journal.hold_turn(other) as elsewhere:
            assert elsewhere  # holds are per session
    with journal.hold_turn(session) as again:
        assert again


def test_holds_are_per_tenant(journal: Journal) -> None:
    session = journal.create_session("t").session_id
    with journal.hold_turn(session) as mine, journal.for_tenant("b").hold_turn(session) as theirs:
        assert mine
        assert theirs


def test_another_thread_sees_the_hold(journal: Journal) -> None:
    session = journal.create_session("t").session_id
    seen: list[bool] = []

    def look() -> None:
        with journal.hold_turn(session) as got:
            seen.append(got)

    with journal.hold_turn(session):
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
    assert seen == [False]


def _cut_turn(journal: Journal, agent: Agent) -> str:
    session = agent.create_session(journal, "cut").session_id
    journal.append(session, "user_message", {"content": "hi"})
    assert journal.get_session(session).turn_open
    return session


def _agent() -> Agent:
    return Agent(ScriptedModel({}, fallback="done"), [], name="holds")


def test_resume_leaves_a_held_turn_alone_and_finishes_it_once_free(journal: Journal) -> None:
    agent = _agent()
    session = _cut_turn(journal, agent)
    with journal.hold_turn(session):
        report = resume_incomplete(journal, [agent])
        assert report.finished == []
        assert report.failed == []
        assert journal.get_session(session).turn_open
        with pytest.raises(Conflict):
            agent.finish_turn(journal, session)
        with pytest.raises(Conflict):
            agent.run_turn(journal, session, "again")
    report = resume_incomplete(journal, [agent])
    assert [r.session_id for r in report.finished] == [session]
    assert not journal.get_session(session).turn_open


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from agentjournal import Journal
    journal = Journal.open(sys.argv[1])
    with journal.hold_turn(sys.argv[2]) as held:
        print("held" if held else "refused", flush=True)
        time.sleep(600)
    """
)


def test_another_instance_sees_the_hold_until_its_process_dies(
    journal: Journal, journal_url: str, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("SQLite holds are in-process: one server per file (docs/postgres.md)")
    agent = _agent()
    session = _cut_turn(journal, agent)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, journal_url, session],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with journal.hold_turn(session) as got:
            assert not got
        assert resume_incomplete(journal, [agent]).finished == []
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    # The server ends a dead client's session, and its locks, once it notices: poll for it.
    for _ in range(200):
        with journal.hold_turn(session) as got:
            if got:
                break
        threading.Event().wait(0.05)
    assert got
    report = resume_incomplete(journal, [agent])
    assert [r.session_id for r in report.finished] == [session]

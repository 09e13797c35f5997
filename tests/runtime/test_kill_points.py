"""A turn killed at every step, then finished by `resume_incomplete` in another process.

A child process runs one turn of an agent whose only tool takes an order (a side effect recorded
in a ledger file, one synced line per execution) and SIGKILLs itself at one kill point. The
parent reopens the journal (every backend: the child opens the same `journal_url`; on PostgreSQL
the server drops the dead child's turn hold with its connection), resumes with the same agent
(same tool, same ledger) and checks: the turn is finished, `verify()` is clean, a non-idempotent
tool ran at most once (a call cut between its effect and its result gets an "interrupted" error
result instead of a second run), and an idempotent one ran to a real result. Every kill point is
enumerated, for both kinds of tool; the exact number of executions, and in which process, is
known for each.

The child is this module, loaded by path (`CHILD`), so both processes build the same agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Event, Journal, ModelError
from agentjournal.runtime import (
    Agent,
    Invocation,
    ModelReply,
    RequestedCall,
    Tool,
    resume_incomplete,
)
from agentjournal.runtime.agent import ERROR_PREFIX

AGENT = "orders"
REQUEST = "order one book"
WAIT = 60.0  # seconds a child may take before the test fails instead of hanging

# Kill point -> how many of the turn's events are durable when the process dies there.
# The turn: user_message, assistant_message (text), tool_call, tool_result, assistant_message.
KILL_POINTS = {
    "after_user_message": 1,  # on_event(user_message)
    "model_call_1": 1,  # entering the model's first call
    "after_tool_call": 3,  # on_event(tool_call): the text and the call are one batch
    "tool_entry": 3,  # the tool started, before its side effect
    "tool_after_effect": 3,  # the ledger line is synced, the tool has not returned
    "after_tool_result": 4,  # on_event(tool_result)
    "model_call_2": 4,  # entering the model's second call
    "after_assistant_message": 5,  # on_event(final assistant_message), before run_turn returns
}
TURN = ["user_message", "assistant_message", "tool_call", "tool_result", "assistant_message"]


def die(point: str, kill_at: str | None) -> None:
    if point == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


class OrderModel:
    """Asks for `place_order` once per user message, then reports its result; dies on entering
    its n-th call in this process when told to."""

    def __init__(self, kill_at: str | None) -> None:
        self.kill_at = kill_at
        self.calls = 0

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        self.calls += 1
        die(f"model_call_{self.calls}", self.kill_at)
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if not results:
            order = RequestedCall("call_1", "place_order", json.dumps({"item": "book"}))
            return ModelReply("placing your order", (order,))
        if results[-1].startswith(ERROR_PREFIX):
            return ModelReply("the order may or may not have gone through: please check")
        return ModelReply(f"ordered: {results[-1]}")


def build_agent(ledger: Path, idempotent: bool, kill_at: str | None = None) -> Agent:
    def place_order(arguments: dict[str, Any], invocation: Invocation) -> str:
        die("tool_entry", kill_at)
        with ledger.open("a", encoding="utf-8") as file:
            file.write(json.dumps({"key": invocation.key, "pid": os.getpid()}) + "\n")
            file.flush()
            os.fsync(file.fileno())
        die("tool_after_effect", kill_at)
        return f"receipt for {arguments['item']}"

    tool = Tool("place_order", place_order, idempotent=idempotent, description="Take an order.")
    return Agent(OrderModel(kill_at), [tool], name=AGENT)


def child_main(url: str, ledger: str, session_id: str, kind: str, kill_at: str) -> None:
    agent = build_agent(Path(ledger), kind == "idempotent", kill_at)
    with Journal.open(url) as journal:

        def on_event(event: Event) -> None:
            if event.type == "assistant_message":
                # The text before the tool call is not the end of the turn; the reply is.
                if not event.payload["content"].startswith("placing"):
                    die("after_assistant_message", kill_at)
            else:
                die(f"after_{event.type}", kill_at)

        result = agent.run_turn(journal, session_id, REQUEST, on_event=on_event)
        print(json.dumps({"reply": result.reply}), flush=True)


CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kill_points_child", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.child_main(*sys.argv[2:])
"""


def ledger_runs(ledger: Path, key: str) -> list[int]:
    """The pid of each execution of the call with invocation key `key`."""
    if not ledger.exists():
        return []
    lines = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
    assert all(line["key"] == key for line in lines), lines
    return [line["pid"] for line in lines]


def expected_outcome(kill_at: str, idempotent: bool) -> tuple[int, int, bool]:
    """(executions in the child, executions in the resuming parent, result is an error)."""
    durable = KILL_POINTS[kill_at]
    if durable < 3:  # the call was never journaled: resume asks the model and runs it once
        return 0, 1, False
    if durable > 3:  # its result is durable: nothing runs again
        return 1, 0, False
    child = 1 if kill_at == "tool_after_effect" else 0
    if idempotent:
        return child, 1, False  # run again under the same key
    return child, 0, True  # never run twice: "interrupted"


@pytest.mark.parametrize("kind", ["idempotent", "non_idempotent"])
@pytest.mark.parametrize("kill_at", list(KILL_POINTS))
def test_a_turn_killed_at_each_step_is_finished_by_resume(
    journal_url: str, tmp_path: Path, kill_at: str, kind: str
) -> None:
    idempotent = kind == "idempotent"
    ledger = tmp_path / "ledger.jsonl"
    with Journal.open(journal_url) as journal:
        session_id = build_agent(ledger, idempotent).create_session(journal, "shop").session_id
    key = f"{session_id}:call_1"

    args = [sys.executable, "-c", CHILD, __file__, journal_url, str(ledger), session_id, kind]
    child = subprocess.Popen(
        [*args, kill_at],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise

    assert child.returncode == -signal.SIGKILL, (
        f"the child was not killed at {kill_at} (exit {child.returncode}):\n{stdout}\n{stderr}"
    )
    assert stdout == ""  # run_turn never returned
    child_runs, resume_runs, is_error = expected_outcome(kill_at, idempotent)
    assert ledger_runs(ledger, key) == [child.pid] * child_runs

    with Journal.open(journal_url) as journal:
        # What the kill left: exactly the steps before the kill point.
        left = [e.type for e in journal.events(session_id)][1:]
        assert left == TURN[: KILL_POINTS[kill_at]]
        assert journal.get_session(session_id).turn_open is (kill_at != "after_assistant_message")

        report = resume_incomplete(journal, [build_agent(ledger, idempotent)])

        assert report.failed == []
        assert len(report.finished) == (0 if kill_at == "after_assistant_message" else 1)
        events = journal.events(session_id)
        assert [e.type for e in events][1:] == TURN
        assert journal.get_session(session_id).turn_open is False
        assert journal.open_turns() == []
        assert journal.verify().ok

        runs = ledger_runs(ledger, key)
        assert runs == [child.pid] * child_runs + [os.getpid()] * resume_runs
        if not idempotent:
            assert len(runs) <= 1
        [result] = [e.payload for e in events if e.type == "tool_result"]
        assert result["call_id"] == "call_1"
        if is_error:
            assert result["is_error"] is True
            assert result["content"].startswith(ERROR_PREFIX)
            assert "interrupted" in result["content"]
            assert events[-1].payload["content"].startswith("the order may or may not")
        else:
            assert result == {"call_id": "call_1", "content": "receipt for book"}
            assert events[-1].payload["content"] == "ordered: receipt for book"

        # A second resume finds nothing to do and runs nothing.
        again = resume_incomplete(journal, [build_agent(ledger, idempotent)])
        assert (again.finished, again.failed) == ([], [])
        assert ledger_runs(ledger, key) == runs
        assert len(journal.events(session_id)) == len(events)


def test_resume_leaves_other_agents_sessions_alone(journal: Journal, tmp_path: Path) -> None:
    """A cut turn in a session of another agent (or of no agent) is not finished here."""
    ledger = tmp_path / "ledger.jsonl"
    agent = build_agent(ledger, idempotent=True)
    other = journal.create_session("other", metadata={"agent": "someone-else"})
    plain = journal.create_session("plain chat")
    for session in (other, plain):
        journal.append(session.session_id, "user_message", {"content": REQUEST})

    report = resume_incomplete(journal, [agent])

    assert (report.finished, report.failed) == ([], [])
    assert {s.session_id for s in journal.open_turns()} == {
        other.session_id,
        plain.session_id,
    }
    assert not ledger.exists()


class _Unreachable:
    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        raise ModelError("the model is down")


def test_resume_names_the_tenant_of_each_turn_it_could_not_finish(journal: Journal) -> None:
    """Two tenants' cut turns in sessions of one id are two entries, each with its tenant."""
    agent = Agent(_Unreachable(), name=AGENT)
    for tenant in ("a", "b"):
        view = journal.for_tenant(tenant)
        view.create_session(tenant, session_id="user-42", metadata={"agent": AGENT})
        view.append("user-42", "user_message", {"content": REQUEST})

    report = resume_incomplete(journal, [agent], all_tenants=True)

    assert report.finished == []
    assert sorted((t.tenant, t.session_id) for t in report.failed) == [
        ("a", "user-42"),
        ("b", "user-42"),
    ]
    assert all("the model is down" in turn.reason for turn in report.failed)

"""`KnownState`, what a writer knows of an SDK session from its own last write: pure, no
database. What it may not know it must say it does not know (None), so that the writer reads."""

from __future__ import annotations

from typing import Any

from agentjournal.events import Event
from agentjournal.integrations import known_state
from agentjournal.integrations.known_state import KnownState


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "42"}


def with_id(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": []}


def appended(first_seq: int, events: list[Any]) -> list[Event]:
    return [
        Event(first_seq + i, "s", first_seq + i, e.type, e.payload, 0) for i, e in enumerate(events)
    ]


def write(known: KnownState, items: list[Any]) -> list[Event]:
    events = known.events_for(items)
    assert events is not None
    assert known.last_seq is not None
    stored = appended(known.last_seq + 1, events)
    known.wrote(stored, [(e.seq, e.payload["item"]) for e in stored])
    return stored


def test_nothing_is_known_until_a_read() -> None:
    known = KnownState()
    assert known.last_seq is None
    assert known.is_retry([with_id(1)]) is None  # not known: the writer reads


def test_a_retry_is_the_newest_items_again_with_an_id() -> None:
    known = KnownState()
    known.read(0, [], complete=True)
    write(known, [user("hi"), with_id(1)])
    assert known.is_retry([user("hi"), with_id(1)]) is True
    assert known.is_retry([with_id(1)]) is True
    assert known.is_retry([user("hi")]) is False  # no id: a question asked twice
    assert known.is_retry([with_id(2)]) is False
    # Longer than what is known: all visible items are known here, so not a retry.
    assert known.is_retry([with_id(0), user("hi"), with_id(1)]) is False


def test_when_older_items_are_not_known_a_longer_batch_may_be_a_retry() -> None:
    known = KnownState()
    known.read(10, [], complete=False)  # a session with items this writer has not seen
    assert known.is_retry([with_id(1)]) is None
    write(known, [with_id(1)])
    assert known.is_retry([with_id(0), with_id(1)]) is None  # its end matches: read to tell
    assert known.is_retry([with_id(1), with_id(2)]) is False  # its end does not


def test_calls_it_wrote_are_known_and_an_unknown_output_is_read() -> None:
    known = KnownState()
    known.read(0, [], complete=True)
    stored = write(known, [call("c1")])
    assert stored[0].type == "tool_call"
    assert known.calls == {"c1": True}
    events = known.events_for([output("c1"), call("c1"), call("c2"), output("c2")])
    assert events is not None
    assert [e.type for e in events] == ["tool_result", "responses.item", "tool_call", "tool_result"]
    assert known.events_for([output("c9")]) is None  # its call's state is not known
    assert known.events_for([call("c9"), output("c9")]) is not None  # its call is in the batch
    known.read_calls({"c9": True})
    events = known.events_for([output("c9")])
    assert events is not None
    assert events[0].type == "tool_result"


def test_forget_keeps_call_states_which_only_ever_close() -> None:
    known = KnownState()
    known.read(0, [], complete=True)
    write(known, [call("c1"), output("c1"), user("hi")])
    known.forget()
    assert (known.last_seq, known.tail, known.complete) == (None, [], False)
    assert known.calls == {"c1": False}


def test_removal_and_clear_move_the_tail() -> None:
    known = KnownState()
    known.read(0, [], complete=True)
    write(known, [with_id(1), with_id(2)])
    known.removed(2, 3)
    assert (known.last_seq, [item for _, item in known.tail]) == (3, [with_id(1)])
    assert known.is_retry([with_id(1)]) is True
    known.cleared(4)
    assert (known.last_seq, known.tail, known.complete) == (4, [], True)
    assert known.is_retry([with_id(1)]) is False


def test_what_it_keeps_is_bounded() -> None:
    known = KnownState()
    known.read(0, [], complete=True)
    for n in range(known_state.TAIL + 5):
        write(known, [with_id(n)])
    assert len(known.tail) == known_state.TAIL
    assert known.complete is False  # the oldest items are no longer known
    assert known.is_retry([with_id(known_state.TAIL + 4)]) is True
    known.read_calls({f"c{n}": True for n in range(known_state.CALLS + 10)})
    assert len(known.calls) == known_state.CALLS
    assert "c0" not in known.calls
    assert f"c{known_state.CALLS + 9}" in known.calls

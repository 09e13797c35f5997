"""Export and import (agentjournal.transfer), on every backend: a rich journal survives the round
trip exactly, and every kind of corrupt line is refused with its line number, writing nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import CorruptLine, Journal, NewEvent
from agentjournal.transfer import ImportReport, export_lines, import_lines
from postgres_fixtures import fresh_schema, url_for


@pytest.fixture
def target(backend: str, tmp_path: Path) -> Iterator[Journal]:
    """An empty second database of the same backend."""
    if backend == "sqlite":
        with Journal.open(tmp_path / "target.db") as journal:
            yield journal
        return
    with fresh_schema() as schema, Journal.open(url_for(schema)) as journal:
        yield journal


def build_rich(journal: Journal) -> list[str]:
    """Sessions using every kind of event the verbs write: the seed's conversation, a correction,
    a compaction, a fork, tasks through their lifecycle, renames, a soft delete, custom events."""
    seed = journal.create_session("订单客服", system_prompt="你是订单客服。", metadata={"u": 1})
    sid = seed.session_id
    journal.append(sid, "user_message", {"content": "你好"}, idempotency_key="m1")
    journal.append(sid, "assistant_message", {"content": "你好！"})
    journal.append(sid, "user_message", {"content": "帮我查一下订单数量"})
    journal.append_many(
        sid,
        [
            NewEvent("assistant_message", {"content": ""}),
            NewEvent("tool_call", {"call_id": "call_1", "name": "count", "arguments": "{}"}),
        ],
    )
    journal.append(sid, "tool_result", {"call_id": "call_1", "content": "42"})
    journal.append(sid, "assistant_message", {"content": "你当前有 42 个订单。"})
    journal.append(sid, "user_message", {"content": "谢谢！", "supersedes": 4})
    journal.compact(sid, 7, "asked for the order count: 42")
    journal.append(sid, "myapp.memory_saved", {"note": "likes short answers"})
    task = journal.create_task(sid, "report", {"month": 11}, max_retries=2)
    claimed = journal.claim_task("w1", ["report"])
    assert claimed is not None
    journal.task_progress(task.task_id, 0.5, attempt=claimed.attempt, message="half")
    journal.fail_task(task.task_id, attempt=claimed.attempt, error="timeout")
    again = journal.claim_task("w1", ["report"])
    assert again is not None
    journal.complete_task(task.task_id, attempt=again.attempt, output={"rows": 3})
    journal.create_task(sid, "cleanup")
    journal.update_session(sid, title="订单客服 (done)", metadata={"u": 2})
    fork = journal.fork(sid, at_seq=7, title="branch")
    journal.append(fork.session_id, "user_message", {"content": "another question"})
    gone = journal.create_session("to delete", idempotency_key="create-gone")
    journal.append(gone.session_id, "user_message", {"content": "bye"})
    journal.delete_session(gone.session_id)
    return [sid, fork.session_id, gone.session_id]


def snapshot(journal: Journal, session_ids: list[str]) -> dict[str, Any]:
    """Everything a reader can see of the sessions, minus the ids and positions a store assigns."""
    seen: dict[str, Any] = {}
    for sid in session_ids:
        session = journal.get_session(sid).to_dict()
        for assigned in ("last_position",):
            session.pop(assigned, None)
        events = [
            {k: v for k, v in e.to_dict().items() if k not in ("event_id", "position")}
            for e in journal.events(sid, limit=1000)
        ]
        seen[sid] = {
            "session": session,
            "events": events,
            "replay": journal.replay(sid),
            "anthropic": journal.replay(sid, format="anthropic"),
            "context": journal.context(sid, max_tokens=10_000),
            "messages": [m.to_dict() for m in journal.messages(sid)],
            "tool_calls": [c.to_dict() for c in journal.tool_calls(sid)],
            "tasks": [t.to_dict() for t in journal.tasks(session_id=sid)],
        }
    return seen


def test_round_trip_replays_identically(journal: Journal, target: Journal) -> None:
    session_ids = build_rich(journal)
    lines = list(export_lines(journal))
    assert len(lines) == sum(journal.get_session(s).last_seq for s in session_ids)

    report = import_lines(target, lambda: lines)

    assert (report.events, report.sessions_created, report.sessions_extended) == (len(lines), 3, 0)
    assert snapshot(target, session_ids) == snapshot(journal, session_ids)
    assert target.verify().ok
    # Keys came along: a retry against the copy returns the original, not a new event.
    retried = target.append(
        session_ids[0], "user_message", {"content": "你好"}, idempotency_key="m1"
    )
    assert retried.seq == 2
    assert (
        target.create_session("to delete", idempotency_key="create-gone").session_id
        == (session_ids[2])
    )


def test_export_of_chosen_sessions_in_seq_order(journal: Journal) -> None:
    first, fork, _ = build_rich(journal)
    lines = [json.loads(line) for line in export_lines(journal, [fork, first])]
    assert [(e["session_id"], e["seq"]) for e in lines] == [
        (fork, n) for n in range(1, journal.get_session(fork).last_seq + 1)
    ] + [(first, n) for n in range(1, journal.get_session(first).last_seq + 1)]


def test_import_continues_a_session_at_its_next_seq(journal: Journal, target: Journal) -> None:
    sid = journal.create_session("grows").session_id
    journal.append(sid, "user_message", {"content": "one"})
    import_lines(target, lambda: list(export_lines(journal)))
    journal.append(sid, "assistant_message", {"content": "two"})
    tail = [line for line in export_lines(journal) if json.loads(line)["seq"] == 3]

    report = import_lines(target, lambda: tail)

    assert (report.events, report.sessions_created, report.sessions_extended) == (1, 0, 1)
    assert target.replay(sid) == journal.replay(sid)


def seed_lines() -> list[str]:
    events: list[dict[str, Any]] = [
        {"type": "session_created", "payload": {"title": "t"}},
        {"type": "user_message", "payload": {"content": "hi"}},
        {"type": "tool_call", "payload": {"call_id": "c1", "name": "n", "arguments": "{}"}},
        {"type": "tool_result", "payload": {"call_id": "c1", "content": "ok"}},
    ]
    return [
        json.dumps({"session_id": "sess_imported", "seq": n, "created_at": 1000 + n, **event})
        for n, event in enumerate(events, start=1)
    ]


def replaced(lines: list[str], index: int, **changes: Any) -> list[str]:
    event = json.loads(lines[index])
    event.update(changes)
    return [*lines[:index], json.dumps(event), *lines[index + 1 :]]


CORRUPT = {
    "not json": lambda lines: [*lines[:2], '{"session_id": "sess_imported", "seq": 3,', *lines[3:]],
    "not an object": lambda lines: [*lines[:2], "[1, 2]", *lines[3:]],
    "missing payload": lambda lines: [*lines[:2], json.dumps({"session_id": "x", "seq": 3})],
    "a seq gap": lambda lines: replaced(lines, 2, seq=4),
    "seq as text": lambda lines: replaced(lines, 2, seq="3"),
    "an unknown type": lambda lines: replaced(lines, 2, type="Bogus Type"),
    "a bad payload": lambda lines: replaced(lines, 2, payload={"call_id": "c1"}),
    "a result without its call": lambda lines: replaced(
        lines, 2, type="user_message", payload={"content": "x"}
    ),
    "a second session_created": lambda lines: replaced(lines, 2, type="session_created"),
    "invalid UTF-8": lambda lines: [*lines[:2], b'{"seq": 3, "x": "\xff"}', *lines[3:]],
}


@pytest.mark.parametrize("damage", sorted(CORRUPT))
def test_a_corrupt_line_is_refused_with_its_number_and_nothing_written(
    journal: Journal, damage: str
) -> None:
    lines = CORRUPT[damage](seed_lines())
    before = list(journal.events_all(limit=1000))

    with pytest.raises(CorruptLine) as caught:
        import_lines(journal, lambda: lines)

    assert caught.value.line == (4 if damage == "a result without its call" else 3)
    assert str(caught.value).startswith(f"line {caught.value.line}: ")
    assert list(journal.events_all(limit=1000)) == before
    assert journal.sessions(status="all") == []


def test_a_session_that_exists_is_refused(journal: Journal) -> None:
    import_lines(journal, seed_lines)
    with pytest.raises(CorruptLine, match=r"line 1: session 'sess_imported' already exists"):
        import_lines(journal, seed_lines)
    assert journal.get_session("sess_imported").last_seq == 4


def test_a_line_of_a_session_the_file_never_created_is_refused(journal: Journal) -> None:
    with pytest.raises(CorruptLine, match=r"line 1: session 'sess_imported' does not exist"):
        import_lines(journal, lambda: seed_lines()[1:])


def test_blank_lines_are_skipped_and_numbers_stay_true(journal: Journal) -> None:
    lines = seed_lines()
    padded = ["", lines[0], "   ", *lines[1:3], replaced(lines, 3, seq=9)[3]]
    with pytest.raises(CorruptLine) as caught:
        import_lines(journal, lambda: padded)
    assert caught.value.line == 6
    report = import_lines(journal, lambda: ["", *lines, ""])
    assert report.events == 4


def test_imports_stream_in_chunks(journal: Journal) -> None:
    """More lines than one chunk: sessions spanning chunk boundaries keep their checks."""
    lines = [
        json.dumps(
            {
                "session_id": "sess_big",
                "seq": 1,
                "type": "session_created",
                "payload": {"title": "big"},
                "created_at": 1,
            }
        )
    ]
    for seq in range(2, 1302):
        lines.append(
            json.dumps(
                {
                    "session_id": "sess_big",
                    "seq": seq,
                    "type": "user_message",
                    "payload": {"content": f"m{seq}"},
                    "created_at": seq,
                }
            )
        )
    seen: list[int] = []
    report = import_lines(journal, lambda: lines, progress=seen.append)
    assert report.events == 1301
    assert seen == [500, 1000, 1301]
    assert journal.get_session("sess_big").last_seq == 1301
    assert journal.verify().ok


# Values Python's json reads into something no journal holds, or cannot read at all.
_HOSTILE = st.sampled_from(
    [
        "1" * 4301,
        "9223372036854775808",
        "18446744073709551616",
        "-1",
        "1e400",
        "-1e400",
        "1.5",
        "NaN",
        '"\\ud800"',
        '"\\u0000"',
        "[" * 70 + "]" * 70,
        "[" * 5000,
        "null",
        "true",
        "{}",
    ]
)
_FIELDS = ["session_id", "seq", "type", "payload", "created_at", "idempotency_key"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    line=st.integers(min_value=0, max_value=3),
    field=st.sampled_from([*_FIELDS, "payload.content", "payload.extra", "whole line"]),
    value=_HOSTILE,
)
def test_no_json_text_on_an_import_line_escapes_as_anything_but_corrupt_line(
    journal: Journal, line: int, field: str, value: str
) -> None:
    lines = seed_lines()
    decoded = json.loads(lines[line])
    marker = "@@HOSTILE@@"
    if field == "whole line":
        text = value
    else:
        if field.startswith("payload."):
            decoded["payload"][field.partition(".")[2]] = marker
        else:
            decoded[field] = marker
        text = json.dumps(decoded).replace(f'"{marker}"', value)
    lines[line] = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    outcome: ImportReport | CorruptLine
    try:
        outcome = import_lines(journal, lambda: lines)
    except CorruptLine as exc:
        outcome = exc
    if isinstance(outcome, CorruptLine):
        assert outcome.line == line + 1
        assert journal.sessions(status="all") == []
        return
    # Accepted (a value the journal holds, e.g. a payload's extra key): the file went in whole.
    assert outcome.events == 4
    journal.purge_session("sess_imported", actor="test")

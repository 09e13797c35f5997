"""Two tenants may choose the same ids: a session is (tenant, session_id), everywhere.

Framework users pick their own session ids (`user-42`, a LangGraph thread "1"), so tenants A and B
of one journal both hold a session `user-42`, with the same idempotency keys and call ids in it.
Through every verb neither sees, blocks nor learns of the other's: each call answers as it would
if the other tenant had no such session.
"""

from __future__ import annotations

import pytest

from agentjournal import Conflict, Journal, NewEvent, SessionNotFound
from agentjournal.transfer import export_lines
from expected import settled_feed

SID = "user-42"


def conversation(tenant: str) -> list[NewEvent]:
    """The same keys and call ids in both tenants; the text says whose it is."""
    return [
        NewEvent("user_message", {"content": f"{tenant} asks about parcel"}, "k2"),
        NewEvent(
            "tool_call", {"call_id": "call_1", "name": "track", "arguments": f'"{tenant}"'}, "k3"
        ),
        NewEvent("tool_result", {"call_id": "call_1", "content": f"{tenant} in transit"}, "k4"),
        NewEvent(
            "assistant_message",
            {"content": f"{tenant} parcel arrives", "usage": {"prompt_tokens": 5}},
            "k5",
        ),
    ]


def shared(journal: Journal) -> tuple[Journal, Journal]:
    a, b = journal.for_tenant("a"), journal.for_tenant("b")
    for view in (a, b):
        view.create_session(f"{view.tenant}'s", session_id=SID, system_prompt=view.tenant)
        for event in conversation(view.tenant):
            view.append(SID, event.type, event.payload, idempotency_key=event.idempotency_key)
    return a, b


def test_a_second_tenant_creates_an_id_the_first_holds(journal: Journal) -> None:
    a, b = journal.for_tenant("a"), journal.for_tenant("b")
    a.create_session("A", session_id=SID)
    with pytest.raises(SessionNotFound):
        b.get_session(SID)
    created = b.create_session("B", session_id=SID)
    assert (created.session_id, created.title, created.tenant) == (SID, "B", "b")
    assert a.get_session(SID).title == "A"
    # Each tenant's own id is taken for itself only, and the error speaks of its own session.
    with pytest.raises(Conflict, match="already taken"):
        b.create_session("again", session_id=SID)
    # The same creation key in both tenants makes one session each.
    ka = a.create_session("ka", idempotency_key="create-1")
    kb = b.create_session("kb", idempotency_key="create-1")
    assert ka.session_id != kb.session_id
    assert a.create_session("ka", idempotency_key="create-1").session_id == ka.session_id


def test_each_tenant_reads_only_its_own_session(journal: Journal) -> None:
    a, b = shared(journal)
    for view in (a, b):
        t = view.tenant
        session = view.get_session(SID)
        assert (session.title, session.last_seq, session.event_count) == (f"{t}'s", 5, 5)
        assert session.prompt_tokens == 5
        assert [e.payload.get("content") for e in view.events(SID)][1:] == [
            f"{t} asks about parcel",
            None,
            f"{t} in transit",
            f"{t} parcel arrives",
        ]
        assert [m.content for m in view.messages(SID)] == [
            f"{t} asks about parcel",
            f"{t} parcel arrives",
        ]
        (call,) = view.tool_calls(SID)
        assert (call.arguments, call.result, call.status) == (f'"{t}"', f"{t} in transit", "ok")
        replay = view.replay(SID)
        assert replay[0] == {"role": "system", "content": t}
        assert all(t in str(message) for message in replay[1:])
        assert [s.session_id for s in view.sessions()] == [SID]
        assert {e.session_id for e in settled_feed(view)} == {SID}
        assert all(t in e.payload.get("content", t) for e in settled_feed(view))
        assert view.verify().ok


def test_keys_call_ids_and_expected_seq_are_per_tenant(journal: Journal) -> None:
    a, b = shared(journal)
    # A retry with a key both used returns the caller's own event.
    again = b.append(SID, "user_message", {"content": "b asks about parcel"}, idempotency_key="k2")
    assert again.seq == 2
    assert again.payload["content"] == "b asks about parcel"
    with pytest.raises(Conflict):
        b.append(SID, "user_message", {"content": "a asks about parcel"}, idempotency_key="k2")
    # A's appends move A's seq only; B's expected_seq is checked against B's own.
    a.append_many(SID, [{"type": "user_message", "payload": {"content": "more"}}] * 3)
    b.append(SID, "user_message", {"content": "next"}, expected_seq=5)
    # A call id B already closed is still new to A's next turn, and the other way round.
    a.append(SID, "tool_call", {"call_id": "call_2", "name": "track", "arguments": "{}"})
    b.append(SID, "tool_call", {"call_id": "call_2", "name": "track", "arguments": "{}"})
    b.append(SID, "tool_result", {"call_id": "call_2", "content": "b done"})
    a.append(SID, "tool_result", {"call_id": "call_2", "content": "a done"})
    assert [c.result for c in a.tool_calls(SID)] == ["a in transit", "a done"]
    assert [c.result for c in b.tool_calls(SID)] == ["b in transit", "b done"]
    # A correction names a seq of the caller's own session.
    b.append(SID, "user_message", {"content": "b fixed", "supersedes": 2})
    assert a.messages(SID)[0].content == "a asks about parcel"
    assert b.messages(SID)[0].content == "b fixed"
    assert a.verify().ok
    assert b.verify().ok


def test_compact_fork_and_search_stay_in_their_tenant(journal: Journal) -> None:
    a, b = shared(journal)
    a.compact(SID, 5, "a summary")
    assert "a summary" not in str(b.replay(SID))
    assert b.context(SID, max_tokens=10_000)[1]["content"] == "b asks about parcel"
    fork_a, fork_b = a.fork(SID, 5), b.fork(SID, 2)
    assert (a.get_session(fork_a.session_id).forked_from, fork_a.tenant) == (SID, "a")
    assert b.replay(fork_b.session_id) == b.replay(SID, until=2)
    with pytest.raises(SessionNotFound):
        b.get_session(fork_a.session_id)
    hits_a = a.search("parcel").hits
    hits_b = b.search("parcel").hits
    assert hits_a
    assert hits_b
    assert all(h.session_id in (SID, fork_a.session_id) for h in hits_a)
    assert all("b" in h.snippet and "a " not in h.snippet for h in hits_b)
    assert a.verify().ok
    assert b.verify().ok


def test_tasks_of_one_id_are_per_tenant(journal: Journal) -> None:
    a, b = shared(journal)
    task_a = a.create_task(SID, "ship", {"who": "a"}, idempotency_key="t1")
    task_b = b.create_task(SID, "ship", {"who": "b"}, idempotency_key="t1")
    assert task_a.task_id != task_b.task_id
    assert [t.input for t in a.tasks(session_id=SID)] == [{"who": "a"}]
    assert [t.input for t in b.tasks(session_id=SID)] == [{"who": "b"}]
    claimed = a.claim_task("worker", ["ship"], lease_seconds=60)
    assert claimed is not None
    assert claimed.task_id == task_a.task_id
    # Deleting A's session cancels A's open tasks, not B's of the same session id.
    a.delete_session(SID)
    assert a.get_task(task_a.task_id).status == "cancelled"
    assert b.get_task(task_b.task_id).status == "pending"
    assert b.get_session(SID).status == "active"
    b.append(SID, "user_message", {"content": "still here"})
    assert a.verify().ok
    assert b.verify().ok


def test_purge_removes_one_tenants_session_only(journal: Journal) -> None:
    a, b = shared(journal)
    before = (b.events(SID), b.messages(SID), b.tool_calls(SID), b.search("parcel").hits)
    assert a.purge_session(SID) == 5
    with pytest.raises(SessionNotFound):
        a.get_session(SID)
    assert (b.events(SID), b.messages(SID), b.tool_calls(SID), b.search("parcel").hits) == before
    assert a.search("parcel").hits == []
    # The id is free again for A, and A's new session starts from seq 1.
    a.create_session("A again", session_id=SID)
    assert a.get_session(SID).last_seq == 1
    assert b.get_session(SID).last_seq == 5
    assert a.verify().ok
    assert b.verify().ok


def test_export_import_moves_a_session_between_tenants_of_the_same_id(journal: Journal) -> None:
    a, b = shared(journal)
    lines = list(export_lines(a, [SID]))
    # B holds its own user-42: importing A's over it is refused as B's own id, writing nothing.
    before = b.events(SID)
    with pytest.raises(Exception, match="already exists"):
        b.import_lines(lambda: lines)
    assert b.events(SID) == before
    c = journal.for_tenant("c")
    report = c.import_lines(lambda: lines)
    assert report.events == 5
    assert [e.payload for e in c.events(SID)] == [e.payload for e in a.events(SID)]
    assert c.verify().ok
    assert a.verify().ok
    assert b.verify().ok

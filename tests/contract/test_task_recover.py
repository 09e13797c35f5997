"""recover(): settles expired leases of its tenant (or all) and lists cut turns."""

from __future__ import annotations

from typing import Any

from agentjournal import Journal
from expected import settled_feed
from helpers.task_contract import (
    LEASE,
    OTHER,
    TINY,
    claim,
    claim_one,
    new_session,
    snapshot,
    wait_expired,
)


def test_expired_leases_are_settled_by_recover(journal: Journal) -> None:
    sid = new_session(journal)
    spent = journal.create_task(sid, "spent", max_retries=0)
    retry = journal.create_task(sid, "retry", max_retries=2)
    # The second claim would settle the first lease if it had run out already: the first lease
    # is long enough to outlive the next call, the second is tiny.
    retry_claim = claim(journal, "crashed-2", types=["retry"], lease_seconds=0.5)
    spent_claim = claim(journal, "crashed-1", types=["spent"], lease_seconds=TINY)
    wait_expired(spent_claim)
    wait_expired(retry_claim)
    recovery = journal.recover()
    assert recovery.failed == [spent.task_id]
    assert recovery.requeued == [retry.task_id]
    failed = journal.get_task(spent.task_id)
    assert (failed.status, failed.attempt, failed.retry_count) == ("failed", 1, 0)
    assert failed.error is not None
    assert "lease expired" in failed.error
    assert "crashed-1" in failed.error
    assert (failed.lease_owner, failed.lease_expires_at) == (None, None)
    requeued = journal.get_task(retry.task_id)
    assert (requeued.status, requeued.attempt, requeued.retry_count) == ("pending", 1, 1)
    assert requeued.error is not None
    assert "lease expired" in requeued.error
    # Settled once: a second recover finds nothing and writes nothing.
    before = snapshot(journal)
    again = journal.recover()
    assert (again.requeued, again.failed) == ([], [])
    assert snapshot(journal) == before
    assert claim(journal, "w3", lease_seconds=LEASE).attempt == 2
    assert journal.verify().ok


def test_recover_touches_only_expired_leases_of_its_tenant(journal: Journal) -> None:
    other = journal.for_tenant(OTHER)
    sid = new_session(journal)
    live = journal.create_task(sid, "live")
    claim(journal, "alive", types=["live"], lease_seconds=LEASE)
    pending = journal.create_task(sid, "pending")
    done = journal.create_task(sid, "done")
    claim_one(journal, done.task_id)
    journal.complete_task(done.task_id, attempt=1)
    # The tenant's last claim (a later claim of ours would settle this lease before recover).
    expired = journal.create_task(sid, "expired")
    expired_claim = claim(journal, "crashed", types=["expired"], lease_seconds=TINY)
    theirs_sid = new_session(other)
    theirs = other.create_task(theirs_sid, "expired")
    theirs_claim = claim(other, "their-crashed", lease_seconds=TINY)
    wait_expired(expired_claim)
    wait_expired(theirs_claim)
    untouched = {t: journal.get_task(t) for t in (live.task_id, pending.task_id, done.task_id)}
    others_before = snapshot(journal)[OTHER]

    recovery = journal.recover()
    assert (recovery.requeued, recovery.failed) == ([expired.task_id], [])
    assert journal.get_task(expired.task_id).status == "pending"
    assert {t: journal.get_task(t) for t in untouched} == untouched
    assert snapshot(journal)[OTHER] == others_before
    assert other.get_task(theirs.task_id) == theirs_claim
    default_feed = settled_feed(journal)

    everywhere = journal.recover(all_tenants=True)
    assert (everywhere.requeued, everywhere.failed) == ([theirs.task_id], [])
    settled = other.get_task(theirs.task_id)
    assert (settled.status, settled.retry_count) == ("pending", 1)
    assert settled_feed(journal) == default_feed
    last = settled_feed(other)[-1]
    assert (last.session_id, last.type, last.payload["task_id"]) == (
        theirs_sid,
        "task_failed",
        theirs.task_id,
    )
    assert journal.verify().ok
    assert other.verify().ok


def turn(journal: Journal, events: list[tuple[str, dict[str, Any]]], title: str) -> str:
    sid = new_session(journal, title)
    if events:
        journal.append_many(sid, [{"type": t, "payload": p} for t, p in events])
    return sid


USER = ("user_message", {"content": "帮我查一下订单数量"})
REPLY = ("assistant_message", {"content": "你当前有 42 个订单。"})
THINKING = ("assistant_message", {"content": "我查一下。"})
CALL = ("tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"})
RESULT = ("tool_result", {"call_id": "call_1", "content": "42"})


def test_recover_lists_sessions_whose_last_turn_was_cut(journal: Journal) -> None:
    only_user = turn(journal, [USER], "user message, no reply")
    cut = {
        only_user,
        turn(journal, [USER, THINKING, CALL], "tool call without result"),
        turn(journal, [USER, CALL, RESULT], "tool result, no reply yet"),
        turn(journal, [USER, REPLY, USER], "second turn cut"),
        turn(journal, [USER, REPLY, ("myapp.note", {"x": 1}), USER], "custom event between"),
    }
    whole = {
        turn(journal, [], "empty"),
        turn(journal, [USER, REPLY], "answered"),
        turn(journal, [USER, CALL, RESULT, REPLY], "tool turn answered"),
        turn(journal, [USER, REPLY, ("myapp.note", {"x": 1})], "custom event after"),
        turn(
            journal,
            [USER, REPLY, ("user_message", {"content": "改一下", "supersedes": 2})],
            "user message corrected after the reply",
        ),
    }
    deleted = turn(journal, [USER], "deleted while cut")
    journal.delete_session(deleted)
    other = journal.for_tenant(OTHER)
    theirs = turn(other, [USER], "their cut turn")

    recovery = journal.recover()
    assert {s.session_id for s in recovery.open_turns} == cut
    assert all(s.turn_open and s.tenant == "default" for s in recovery.open_turns)
    assert {s.session_id for s in recovery.open_turns} & (whole | {deleted, theirs}) == set()
    for sid in whole:
        assert journal.get_session(sid).turn_open is False
    assert journal.get_session(deleted).turn_open is True  # cut, but deleted: not resumed

    assert {s.session_id for s in journal.recover(all_tenants=True).open_turns} == cut | {theirs}
    assert {s.session_id for s in other.recover().open_turns} == {theirs}
    # Finishing the turn takes the session off the list.
    journal.append(only_user, *REPLY)
    assert len(journal.recover().open_turns) == len(cut) - 1
    assert journal.verify().ok

"""Compaction: what replay shows after context_compacted, and where a compaction may end."""

from __future__ import annotations

from agentjournal import InvalidEvent, Journal
from expected import a, t, u
from helpers.contract import PROMPT, SUMMARY, call, rejected, result, sys_


def test_compaction_replays_prompt_summary_and_what_follows(
    journal: Journal, long_seed: str
) -> None:
    sid = long_seed
    messages = journal.messages(sid)
    full = journal.replay(sid)
    event = journal.compact(sid, 7, SUMMARY)
    assert (event.seq, event.type, event.payload) == (
        12,
        "context_compacted",
        {"summary": SUMMARY, "until_seq": 7},
    )
    after = [
        u("再查一次"),
        a(None, ("call_2", "query_order_count", "{}")),
        t("call_2", "43"),
        a("现在有 43 个。"),
    ]
    assert journal.replay(sid) == [sys_(PROMPT), sys_(SUMMARY), *after]
    assert journal.replay(sid, until=11) == full
    # The transcript is never compacted.
    assert journal.messages(sid) == messages
    # Anthropic: all system text in `system`.
    shaped = journal.replay(sid, format="anthropic")
    assert isinstance(shaped, dict)
    assert shaped["system"] == f"{PROMPT}\n\n{SUMMARY}"
    assert shaped["messages"][0] == u("再查一次")
    # A later compaction replaces the earlier one.
    journal.compact(sid, 10, "second summary")
    assert journal.replay(sid) == [sys_(PROMPT), sys_("second summary"), a("现在有 43 个。")]
    assert journal.replay(sid, until=12) == [sys_(PROMPT), sys_(SUMMARY), *after]


def test_compaction_rules(journal: Journal, long_seed: str) -> None:
    sid = long_seed
    for until in (12, 13, 100):  # the event would be seq 12
        rejected(journal, InvalidEvent, lambda until=until: journal.compact(sid, until, "s"))
    for until in (5, 9):  # call_1 at 5 / result 6; call_2 at 9 / result 10
        rejected(journal, InvalidEvent, lambda until=until: journal.compact(sid, until, "s"))
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 0, "s"))
    journal.compact(sid, 7, SUMMARY)
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 6, "below the previous"))
    assert journal.compact(sid, 7, "same point again").seq == 13
    # A call with no result yet cannot be compacted away.
    journal.append(sid, "tool_call", {"call_id": "call_3", "name": "n", "arguments": ""})
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 14, "s"))
    assert journal.compact(sid, 11, "before the pending call").seq == 15
    # Within a batch: the call and the compaction together.
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid,
            [
                result("call_3", "done"),
                call("call_4"),
                {"type": "context_compacted", "payload": {"summary": "s", "until_seq": 17}},
            ],
        ),
    )
    events = journal.append_many(
        sid,
        [
            result("call_3", "done"),
            {"type": "context_compacted", "payload": {"summary": "s", "until_seq": 16}},
        ],
    )
    assert [e.seq for e in events] == [16, 17]
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid,
            [
                {"type": "context_compacted", "payload": {"summary": "a", "until_seq": 17}},
                {"type": "context_compacted", "payload": {"summary": "b", "until_seq": 16}},
            ],
        ),
    )


def test_compact_ex_tells_a_new_compaction_from_a_retried_one(
    journal: Journal, long_seed: str
) -> None:
    event, created = journal.compact_ex(long_seed, 7, SUMMARY, idempotency_key="compact-1")
    assert created
    assert (event.type, event.payload) == (
        "context_compacted",
        {"summary": SUMMARY, "until_seq": 7},
    )
    again, created_again = journal.compact_ex(long_seed, 7, SUMMARY, idempotency_key="compact-1")
    assert (again, created_again) == (event, False)
    assert journal.compact(long_seed, 7, SUMMARY, idempotency_key="compact-1") == event
    assert journal.get_session(long_seed).last_seq == event.seq  # written once

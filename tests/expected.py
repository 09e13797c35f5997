"""Builders for what tests expect: OpenAI-shape messages, and the whole global feed of a journal."""

from __future__ import annotations

import time
from typing import Any

from agentjournal import Event, Journal
from agentjournal.backends import PurgeRecord


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: str | None, *calls: tuple[str, str, str]) -> dict[str, Any]:
    """An assistant message; each call is (id, name, arguments)."""
    if not calls:
        return {"role": "assistant", "content": text}
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": args}}
            for i, n, args in calls
        ],
    }


def t(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# The seed's order conversation as replay() gives it, after any system message.
SEED_MESSAGES = [
    u("你好"),
    a("你好！我是订单客服助手，可以帮你查询订单数量。"),
    u("帮我查一下订单数量"),
    a(None, ("call_1", "query_order_count", "{}")),
    t("call_1", "42"),
    a("你当前有 42 个订单。"),
]


def all_events(journal: Journal) -> list[Event]:
    """Every event of the journal's tenant, page by page, in commit order."""
    events: list[Event] = []
    cursor = None
    while page := journal.events_all(after=cursor, limit=10_000):
        events += page
        cursor = page[-1].position
    return events


def settled_feed(journal: Journal, wait: float = 30.0) -> list[Event]:
    """The tenant's whole feed, once it shows every stored event (`verify()` counts them). On
    PostgreSQL the feed shows a commit only when every older transaction in the cluster has ended
    (docs/postgres.md): right after a write, another client's transaction can hold it back for a
    moment. Bounded by `wait` seconds: an event that never shows up fails the test."""
    deadline = time.monotonic() + wait
    while True:
        events = all_events(journal)
        stored = journal.verify().events_checked
        if stored == len(events):
            return events
        assert time.monotonic() < deadline, f"the feed shows {len(events)} of {stored} events"
        time.sleep(0.02)


def settled_purges(journal: Journal, count: int, wait: float = 30.0) -> list[PurgeRecord]:
    """The tenant's purge audit, once it shows `count` purges. PostgreSQL holds a purge back as
    it holds back the feed (`settled_feed`), until every older transaction in the cluster ended.
    Bounded by `wait` seconds: a purge that never shows up fails the test."""
    deadline = time.monotonic() + wait
    while len(purges := journal.purges()) < count:
        assert time.monotonic() < deadline, f"the audit shows {len(purges)} of {count} purges"
        time.sleep(0.02)
    return purges

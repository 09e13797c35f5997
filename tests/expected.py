"""Builders for what tests expect: OpenAI-shape messages, and the whole global feed of a journal."""

from __future__ import annotations

from typing import Any

from agentjournal import Event, Journal


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

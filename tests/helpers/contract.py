"""What the journal contract tests share: the seed conversation and `rejected()`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentjournal import Journal, NewEvent
from expected import SEED_MESSAGES, settled_feed

PROMPT = "你是订单客服助手。"
USAGE = {"prompt_tokens": 120, "completion_tokens": 12}

# The seed's order conversation: seq 2-7 after session_created, each with its own key.
SEED = [
    NewEvent("user_message", {"content": "你好"}, "k2"),
    NewEvent(
        "assistant_message", {"content": "你好！我是订单客服助手，可以帮你查询订单数量。"}, "k3"
    ),
    NewEvent("user_message", {"content": "帮我查一下订单数量"}, "k4"),
    NewEvent(
        "tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"}, "k5"
    ),
    NewEvent("tool_result", {"call_id": "call_1", "content": "42"}, "k6"),
    NewEvent("assistant_message", {"content": "你当前有 42 个订单。", "usage": USAGE}, "k7"),
]


def sys_(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


SEED_REPLAY = [sys_(PROMPT), *SEED_MESSAGES]


def seed(journal: Journal, title: str = "订单客服") -> str:
    """A session holding the seed's conversation at seq 1-7, appended one event at a time."""
    sid = journal.create_session(title, model="scripted", system_prompt=PROMPT).session_id
    for event in SEED:
        journal.append(sid, event.type, event.payload, idempotency_key=event.idempotency_key)
    return sid


def msg(type_: str, content: str, key: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": type_, "payload": {"content": content, **extra}}
    if key is not None:
        event["idempotency_key"] = key
    return event


def call(call_id: str, name: str = "query_order_count", arguments: str = "{}") -> dict[str, Any]:
    return {
        "type": "tool_call",
        "payload": {"call_id": call_id, "name": name, "arguments": arguments},
    }


def result(call_id: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "payload": {"call_id": call_id, "content": content, **extra}}


def state(journal: Journal) -> dict[str, Any]:
    """Everything the public API shows, for the journal's tenant and for tenant "b"."""
    seen: dict[str, Any] = {}
    for tenant in ("default", "b"):
        view = journal.for_tenant(tenant)
        seen[tenant] = (
            settled_feed(view),
            [
                (
                    s,
                    view.events(s.session_id, limit=10_000),
                    view.messages(s.session_id),
                    view.tool_calls(s.session_id),
                )
                for s in view.sessions(status="all", limit=10_000)
            ],
        )
    return seen


def rejected(
    journal: Journal, error: type[Exception], action: Callable[[], object], match: str | None = None
) -> Any:
    """Run `action`, expect `error`, and check that nothing at all was written."""
    before = state(journal)
    with pytest.raises(error, match=match) as caught:
        action()
    assert state(journal) == before
    return caught.value


SUMMARY = "用户查询了订单数量：42。"

"""Sessions worth looking at, written with the library (the server reads the same file): the
seed's 订单客服 conversation, run by the demo's scripted order agent, with a report task part way
through. Used by the browser tests and by screenshot.py."""

from __future__ import annotations

import json

from agentjournal import Journal, NewEvent
from agentjournal.demo.order_agent import QUERY_ORDERS, build

ORDER_TITLE = "订单客服"
ORDER_PROMPT = "你是订单客服助手：帮用户查询订单数量、下单。"
ORDER_REPLY = "你当前有 42 个订单。"
GREETING = "你好"


def order_session(
    journal: Journal,
    *,
    title: str = ORDER_TITLE,
    task_type: str = "report.orders",
    progress: float | None = 0.6,
) -> str:
    """The seed's two turns (seq 2-7: "你好", then the order count through the
    `query_order_count` tool), then a `task_type` task claimed by "worker-1" and, unless
    `progress` is None, reported at that fraction. Returns the session id."""
    agent = build()
    # Bound to the agent (metadata.agent): it runs turns only in its own sessions.
    session = agent.create_session(journal, title, model="scripted", system_prompt=ORDER_PROMPT)
    agent.run_turn(journal, session.session_id, GREETING)
    agent.run_turn(journal, session.session_id, QUERY_ORDERS)
    task = journal.create_task(session.session_id, task_type, {"month": "2025-05"})
    claimed = journal.claim_task("worker-1", [task_type], lease_seconds=3600)
    assert claimed is not None
    assert claimed.task_id == task.task_id, claimed
    if progress is not None:
        step = round(progress * 10)
        journal.task_progress(
            task.task_id, progress, attempt=claimed.attempt, message=f"step {step}/10"
        )
    return session.session_id


FILLER = "lorem ipsum dolor sit amet, " * 5  # ~140 characters a message


def long_session(journal: Journal, events: int, title: str = "long run") -> str:
    """A session of `events` events: session_created, then turns of a user message, a tool call,
    its result and a reply (turn n's texts start "question n:", "result n:", "answer n:"), written
    in batches with `append_many` (open the journal with durability="normal" to write fast)."""
    session_id = journal.create_session(title, model="scripted").session_id
    batch: list[NewEvent] = []
    turn = 0
    for index in range(events - 1):
        kind = index % 4
        if kind == 0:
            batch.append(NewEvent("user_message", {"content": f"question {turn}: {FILLER}"}))
        elif kind == 1:
            arguments = json.dumps({"n": turn})
            call = {"call_id": f"call_{turn}", "name": "lookup", "arguments": arguments}
            batch.append(NewEvent("tool_call", call))
        elif kind == 2:
            result = {"call_id": f"call_{turn}", "content": f"result {turn}: {FILLER}"}
            batch.append(NewEvent("tool_result", result))
        else:
            batch.append(NewEvent("assistant_message", {"content": f"answer {turn}: {FILLER}"}))
            turn += 1
        if len(batch) == 2000:
            journal.append_many(session_id, batch)
            batch = []
    if batch:
        journal.append_many(session_id, batch)
    return session_id

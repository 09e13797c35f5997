"""The order-service agent, scripted: what `agentjournal serve --agent demo` runs.

Demo code, outside the runtime it is built on: its knobs are environment variables the demo and
the tests set for the server process, and its ledger is locked with `fcntl` (POSIX only).

"帮我查一下订单数量" calls `query_order_count` (idempotent: it only reads) and answers
"你当前有 42 个订单。"; "帮我下单：…" calls `place_order` (not idempotent: it takes the
order), which takes `AGENTJOURNAL_ORDER_DELAY` seconds (default 1.0, the payment API) and, if
`AGENTJOURNAL_ORDER_LEDGER` names a file, writes each order it takes there (one line per order,
synced), so a test or the demo can count how many times it really ran. A `report.orders` task
counts the orders in ten steps, continuing from its last reported progress after a restart.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from agentjournal.runtime import Agent, Invocation, Script, ScriptedModel, TaskRun, Tool

__all__ = ["ORDER_COUNT", "PLACE_ORDER", "QUERY_ORDERS", "build"]

ORDER_COUNT = 42
QUERY_ORDERS = "帮我查一下订单数量"
PLACE_ORDER = "帮我下单：一本《设计数据密集型应用》"
SCRIPTS = {
    "你好": Script("你好！我是订单客服助手，可以帮你查询订单数量。"),
    QUERY_ORDERS: Script("你当前有 {result} 个订单。", tool="query_order_count"),
    PLACE_ORDER: Script(
        "已下单，订单号 {result}。",
        tool="place_order",
        arguments={"item": "设计数据密集型应用"},
        on_error="下单时服务中断了。为避免重复下单，我没有自动重试；请在订单列表里确认后，"
        "再告诉我是否需要重新下单。",
    ),
}
FALLBACK = "抱歉，我只能帮你查询订单数量或下单。"
REPORT_STEPS = 10


def query_order_count(arguments: dict[str, Any], invocation: Invocation) -> str:
    return str(ORDER_COUNT)


def place_order(arguments: dict[str, Any], invocation: Invocation) -> str:
    time.sleep(float(os.environ.get("AGENTJOURNAL_ORDER_DELAY", "1.0")))
    ledger = os.environ.get("AGENTJOURNAL_ORDER_LEDGER")
    if not ledger:
        return "A-1001"
    with open(ledger, "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # concurrent turns must not number two orders alike
        file.seek(0)
        number = 1001 + sum(1 for _ in file)
        file.write(json.dumps({"key": invocation.key, "item": arguments.get("item")}) + "\n")
        file.flush()
        os.fsync(file.fileno())
    return f"A-{number}"


def report_orders(run: TaskRun) -> dict[str, Any]:
    """A long task: ten steps, each reported; a new attempt continues where the last one got."""
    step_seconds = float(os.environ.get("AGENTJOURNAL_REPORT_STEP", "0.3"))
    done = round(run.task.progress * REPORT_STEPS)
    for step in range(done + 1, REPORT_STEPS + 1):
        time.sleep(step_seconds)
        run.progress(step / REPORT_STEPS, f"step {step}/{REPORT_STEPS}")
    return {"orders": ORDER_COUNT, "resumed_from": done}


def build() -> Agent:
    return Agent(
        ScriptedModel(SCRIPTS, FALLBACK),
        [
            Tool(
                "query_order_count",
                query_order_count,
                idempotent=True,
                description="How many orders the user has.",
            ),
            Tool(
                "place_order",
                place_order,
                idempotent=False,
                description="Place an order for an item.",
                parameters={
                    "type": "object",
                    "properties": {"item": {"type": "string"}},
                    "required": ["item"],
                },
            ),
        ],
        name="demo",
        task_handlers={"report.orders": report_orders},
    )


def ledger_lines(path: str | Path) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]

"""The agent turn the benchmarks write: one source, so that every table measures the same work.

One turn is a user message, a tool call (`query_order_count`), its result and an assistant
message. The two texts are ~200 characters each, a third of them Chinese, drawn from a seed, so
that every system in a run gets the same bytes. `turn_items` gives the turn as OpenAI Responses
input items (what an Agents SDK session stores); `turn_events` gives the same turn as journal
events.
"""

from __future__ import annotations

import random
from typing import Any

ENGLISH = (
    "the order count for this account is ready and the query ran against the warehouse table"
    " with no errors so the total below covers every region and the last seven days of sales"
)
WORDS = ENGLISH.split()
HANZI = (
    "订单数量已经查询完成仓库表格没有错误总数包括所有地区和最近七天的销售记录请确认结果是否正确谢谢"
)


def text(rng: random.Random, length: int = 200) -> str:
    """~`length` characters, a third of them Chinese, in alternating runs."""
    parts: list[str] = []
    size = 0
    while size < length:
        english = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) + " "
        chinese = "".join(rng.choice(HANZI) for _ in range(max(1, len(english) // 2))) + "。"
        parts += [english, chinese]
        size += len(english) + len(chinese)
    return "".join(parts)[:length]


def turn_items(n: int, seed: int) -> list[dict[str, Any]]:
    """Agent turn `n` as Responses input items."""
    rng = random.Random(seed * 1_000_003 + n)
    return [
        {"role": "user", "content": text(rng)},
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": "query_order_count",
            "arguments": "{}",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": "42"},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text(rng), "annotations": []}],
        },
    ]


def turn_events(n: int, seed: int) -> list[dict[str, Any]]:
    """Agent turn `n` as journal events, with the same texts as `turn_items(n, seed)`."""
    user, call, output, answer = turn_items(n, seed)
    return [
        {"type": "user_message", "payload": {"content": user["content"]}},
        {
            "type": "tool_call",
            "payload": {"call_id": call["call_id"], "name": call["name"], "arguments": "{}"},
        },
        {"type": "tool_result", "payload": {"call_id": output["call_id"], "content": "42"}},
        {"type": "assistant_message", "payload": {"content": answer["content"][0]["text"]}},
    ]

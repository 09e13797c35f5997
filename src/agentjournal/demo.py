"""`agentjournal demo`: the seeds' order-service conversation, survived through a SIGKILL.

Phase 1: a writer process journals the 订单客服 conversation (each event durable before the next
step), then streams writes into a load session. Phase 2: it is killed with SIGKILL while a write is
in flight. Phase 3: the file is reopened and the conversation replayed exactly as the seed prints
it. Phase 4: a second session proves isolation. Phase 5: a client resumes after event 4.

Every table is printed from `events()`, `messages()` and `replay()` of the reopened file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentjournal.journal import Journal

ORDER_SESSION = "sess_a"
DOCS_SESSION = "sess_b"
LOAD_SESSION = "sess_load"

ORDER_CONVERSATION: list[tuple[str, dict[str, Any]]] = [
    ("user_message", {"content": "你好"}),
    ("assistant_message", {"content": "你好！我是订单客服助手，可以帮你查询订单数量。"}),
    ("user_message", {"content": "帮我查一下订单数量"}),
    ("tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"}),
    ("tool_result", {"call_id": "call_1", "content": "42"}),
    ("assistant_message", {"content": "你当前有 42 个订单。"}),
]
DOCS_CONVERSATION: list[tuple[str, dict[str, Any]]] = [
    ("user_message", {"content": "帮我总结一下这份文档"}),
    ("assistant_message", {"content": "这份文档讲的是事件溯源：事件只追加，状态由重放得出。"}),
]


def run_writer(db: str) -> None:
    """The child process: journal the conversation, then write until killed, acking each write."""
    journal = Journal.open(db)
    journal.create_session("订单客服", session_id=ORDER_SESSION)
    for type_, payload in ORDER_CONVERSATION:
        event = journal.append(ORDER_SESSION, type_, payload)
        print(f"ack {event.session_id} {event.seq} {event.event_id}", flush=True)
    journal.create_session("压测", session_id=LOAD_SESSION)
    tick = 0
    while True:
        batch = [{"type": "demo.tick", "payload": {"n": tick + i}} for i in range(3)]
        for event in journal.append_many(LOAD_SESSION, batch):
            print(f"ack {event.session_id} {event.seq} {event.event_id}", flush=True)
        tick += 3


def _payload_text(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def events_table(journal: Journal, session_id: str, *, after: int = 0) -> Table:
    table = Table(title=f"events of {session_id} after seq {after}", title_justify="left")
    for column in ("seq", "event_id", "session", "type", "payload"):
        # JSON has no spaces to wrap at: fold it rather than cut it on narrow terminals.
        table.add_column(column, no_wrap=column != "payload", overflow="fold")
    for event in journal.events(session_id, after=after, limit=1000):
        table.add_row(
            str(event.seq),
            str(event.event_id),
            event.session_id,
            event.type,
            _payload_text(event.payload),
        )
    return table


def replay_lines(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The replay as the seed prints it: one line per message, role in brackets."""
    lines = []
    for message in messages:
        role = f"[{message['role']}]"
        if message.get("tool_calls"):
            calls = ", ".join(
                f"{c['id']} {c['function']['name']} args={c['function']['arguments']}"
                for c in message["tool_calls"]
            )
            lines.append(f"{role:<11} tool_calls: [{calls}]")
        elif message["role"] == "tool":
            lines.append(f"{role:<11} {message['tool_call_id']} -> {message['content']}")
        else:
            lines.append(f"{role:<11} {message['content']}")
    return lines


def isolation_table(journal: Journal, session_ids: Sequence[str]) -> Table:
    table = Table(title="isolation: each session sees only its own rows", title_justify="left")
    for column in ("session", "title", "events", "message seqs"):
        table.add_column(column)
    for session_id in session_ids:
        session = journal.get_session(session_id)
        seqs = [m.seq for m in journal.messages(session_id)]
        table.add_row(session_id, session.title, str(session.event_count), str(seqs))
    return table


def _kill_writer_mid_stream(db: str, console: Console) -> list[tuple[str, int, int]]:
    """Start the writer, wait for the conversation and some load, SIGKILL it mid-write."""
    child = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.demo", db],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked: list[tuple[str, int, int]] = []
    target = len(ORDER_CONVERSATION) + random.randint(30, 90)
    try:
        for line in child.stdout:
            _, session_id, seq, event_id = line.split()
            acked.append((session_id, int(seq), int(event_id)))
            if len(acked) >= target:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    loaded = len(acked) - len(ORDER_CONVERSATION)
    console.print(
        f"[bold]SIGKILL[/] sent to writer pid {child.pid} while it was writing the load session"
        f" ({loaded} load events acknowledged before the kill)."
    )
    return acked


def main(db: str | None = None, *, keep: bool = False) -> int:
    console = Console(highlight=False)
    workdir = None if db else tempfile.mkdtemp(prefix="agentjournal-demo-")
    path = db or str(Path(workdir or ".") / "demo.db")
    if Path(path).exists():
        console.print(f"[red]{path} exists; the demo needs a new file.[/]")
        return 2
    started = time.perf_counter()

    console.rule("Phase 1-2 · a writer journals the conversation, then is killed with SIGKILL")
    acked = _kill_writer_mid_stream(path, console)

    console.rule("Phase 3 · reopen the file: every acknowledged event is there")
    with Journal.open(path) as journal:
        present = {e.event_id for e in journal.events_all(limit=10_000)}
        lost = [a for a in acked if a[2] not in present]
        report = journal.verify()
        console.print(
            f"{len(acked)} acknowledged events, {len(lost)} lost; "
            f"verify(): ok={report.ok}, {report.events_checked} events checked, "
            f"{len(report.differences)} projection differences."
        )
        console.print(events_table(journal, ORDER_SESSION, after=1))
        console.print("replay(sess_a), the message list sent back to the model:")
        replayed = journal.replay(ORDER_SESSION)
        assert isinstance(replayed, list)
        for line in replay_lines(replayed):
            console.print(line, markup=False)

        console.rule("Phase 4 · a second session, 文档助手, proves isolation")
        before = journal.messages(ORDER_SESSION)
        journal.create_session("文档助手", session_id=DOCS_SESSION)
        for type_, payload in DOCS_CONVERSATION:
            journal.append(DOCS_SESSION, type_, payload)
        unchanged = journal.messages(ORDER_SESSION) == before
        console.print(isolation_table(journal, [ORDER_SESSION, DOCS_SESSION]))
        console.print(f"sess_a's messages are the same before and after sess_b: {unchanged}")

        console.rule("Phase 5 · a client reconnects and resumes after event 4")
        console.print(events_table(journal, ORDER_SESSION, after=4))
        ok = not lost and report.ok and unchanged
    console.rule()
    elapsed = time.perf_counter() - started
    verdict = "[green]all checks passed[/]" if ok else "[red]a check failed[/]"
    console.print(
        f"{verdict} in {elapsed:.1f} s. Database: {path}" + ("" if keep else " (removed)")
    )
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
        if workdir:
            os.rmdir(workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    run_writer(sys.argv[1])

"""`agentjournal demo`: the scripted order agent, run as a real server and killed three times.

The demo starts `agentjournal serve --agent demo` as a separate process on a new database and
talks to it over HTTP, as a client would:

1. two turns of the 订单客服 conversation; the six events they wrote are printed;
2. the server is SIGKILLed at rest (first kill), restarted, and SIGKILLed again in the middle of
   a turn (second kill: a non-idempotent `place_order`, between its tool call and its result);
3. on restart the cut turn is finished by resume (the order is not placed twice) and the
   conversation is replayed one line per message;
4. a second session, 文档助手, proves isolation;
5. a client resumes the event stream after event 4;
6. a long task is SIGKILLed mid-progress with its server (third kill) and finished by the next
   server's worker.

Every table comes from the journal (`events()`, `replay()`, the SSE stream); nothing printed is
typed into the demo except the user's messages.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse
from rich.console import Console
from rich.table import Table

from agentjournal.demo.order_agent import PLACE_ORDER, QUERY_ORDERS, build, ledger_lines
from agentjournal.events import Event
from agentjournal.journal import Journal

ORDER_SESSION = "sess_a"
DOCS_SESSION = "sess_b"
CHECKOUT_SESSION = "sess_c"
REPORT_SESSION = "sess_r"
DOCS_CONVERSATION: list[tuple[str, dict[str, Any]]] = [
    ("user_message", {"content": "帮我总结一下这份文档"}),
    ("assistant_message", {"content": "这份文档讲的是事件溯源：事件只追加，状态由重放得出。"}),
]
START_TIMEOUT = 30.0
TASK_LEASE_SECONDS = 1.5


class Server:
    """`agentjournal serve --agent demo` in a child process, restartable on the same file."""

    def __init__(self, db: Path, workdir: Path) -> None:
        self.db = db
        self.env = {
            **os.environ,
            "AGENTJOURNAL_ORDER_LEDGER": str(workdir / "orders.jsonl"),
            "AGENTJOURNAL_ORDER_DELAY": "1.0",
            "AGENTJOURNAL_REPORT_STEP": "0.3",
        }
        self.log = workdir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""

    def start(self) -> httpx.Client:
        port = _free_port()
        command = [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(self.db)]
        command += ["--port", str(port), "--agent", "demo"]
        command += ["--task-lease", str(TASK_LEASE_SECONDS)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, env=self.env, stdout=log, stderr=log)
        self.base_url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=self.base_url, timeout=30.0)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if client.get("/healthz").status_code == 200:
                    return client
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {self.log}")
            time.sleep(0.05)

    def kill(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _payload_text(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def events_table(events: Sequence[Event], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("seq", "event_id", "session", "type", "payload"):
        # JSON has no spaces to wrap at: fold it rather than cut it on narrow terminals.
        table.add_column(column, no_wrap=column != "payload", overflow="fold")
    for event in events:
        table.add_row(
            str(event.seq),
            str(event.event_id),
            event.session_id,
            event.type,
            _payload_text(event.payload),
        )
    return table


def _events_of(page: dict[str, Any]) -> list[Event]:
    return [_event(item) for item in page["events"]]


def _event(item: dict[str, Any]) -> Event:
    return Event(
        item["event_id"],
        item["session_id"],
        item["seq"],
        item["type"],
        item["payload"],
        item["created_at"],
        item["idempotency_key"],
        item["position"],
    )


def replay_lines(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The replay, one line per message, role in brackets."""
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


class Demo:
    def __init__(self, db: Path, workdir: Path, console: Console) -> None:
        self.db = db
        self.workdir = workdir
        self.console = console
        self.server = Server(db, workdir)
        self.checks: list[tuple[str, bool]] = []
        self.acknowledged: list[Event] = []

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def check(self, what: str, ok: bool) -> None:
        self.checks.append((what, ok))
        self.say(f"{'✓' if ok else '✗'} {what}")

    def turn(self, client: httpx.Client, session_id: str, text: str) -> str:
        response = client.post(f"/v1/sessions/{session_id}/turns", json={"content": text})
        response.raise_for_status()
        reply: str = response.json()["reply"]
        self.say(f"  you: {text}\n  agent: {reply}")
        return reply

    def run(self) -> bool:
        try:
            client = self.phase_1_2()
            client = self.phase_3(client)
            self.phase_4_5(client)
            self.phase_6(client)
        finally:
            self.server.stop()
        return all(ok for _, ok in self.checks)

    def create_agent_session(self, session_id: str, title: str) -> None:
        # Fixed ids, so every run prints the same (the HTTP API always generates ids).
        with Journal.open(self.db) as journal:
            build().create_session(journal, title, session_id=session_id)

    def phase_1_2(self) -> httpx.Client:
        self.console.rule("Phase 1 · two turns over HTTP with `agentjournal serve --agent demo`")
        self.say("Each step is journaled before the agent acts on it; a reply is sent once stored.")
        self.create_agent_session(ORDER_SESSION, "订单客服")
        client = self.server.start()
        self.turn(client, ORDER_SESSION, "你好")
        self.turn(client, ORDER_SESSION, QUERY_ORDERS)
        page = client.get(f"/v1/sessions/{ORDER_SESSION}/events", params={"after": 1}).json()
        self.acknowledged = _events_of(page)
        self.console.print(
            events_table(self.acknowledged, f"events of {ORDER_SESSION} after seq 1")
        )

        self.console.rule("Phase 2 · SIGKILL the server, then again in the middle of a turn")
        self.say("A crash loses nothing acknowledged, and a turn cut mid-tool is not lost either.")
        pid = self.server.kill()
        self.say(f"SIGKILL sent to server pid {pid} (at rest).")
        client = self.server.start()
        self.create_agent_session(CHECKOUT_SESSION, "下单")
        self.say(f"  you: {PLACE_ORDER}")
        with connect_sse(
            client,
            "POST",
            f"/v1/sessions/{CHECKOUT_SESSION}/turns",
            json={"content": PLACE_ORDER},
        ) as source:
            deltas: list[str] = []  # the model's deltas since the last event: one line for them
            for frame in source.iter_sse():
                # ids are {turn}:{run}:{n}; the run is this server process's own token
                turn, _, n = frame.id.split(":")
                if frame.event.endswith("_delta"):
                    deltas.append(n)
                    continue
                if deltas:
                    self.say(f"  stream: turn {turn} frames {deltas[0]}-{deltas[-1]} model deltas")
                    deltas = []
                self.say(f"  stream: turn {turn} frame {n} {frame.event}")
                if frame.event == "tool_call":
                    pid = self.server.kill()
                    break
        self.say(
            f"SIGKILL sent to server pid {pid} between place_order's tool call and its result."
        )
        return client

    def phase_3(self, client: httpx.Client) -> httpx.Client:
        self.console.rule("Phase 3 · restart: resume finishes the cut turn; the replay is intact")
        self.say("Start-up finishes cut turns before the first request; no order is placed twice.")
        client = self.server.start()
        page = client.get(f"/v1/sessions/{ORDER_SESSION}/events", params={"after": 1}).json()
        self.check(
            f"all {len(self.acknowledged)} acknowledged events of {ORDER_SESSION} survived both"
            " kills",
            _events_of(page) == self.acknowledged,
        )
        page = client.get(f"/v1/sessions/{CHECKOUT_SESSION}/events", params={"after": 1}).json()
        cut = _events_of(page)
        self.console.print(events_table(cut, f"events of {CHECKOUT_SESSION} after seq 1"))
        orders = ledger_lines(self.workdir / "orders.jsonl")
        self.check(
            f"place_order ran {len(orders)} times: it is not idempotent, so resume did not run it"
            " again; its call got an error result and the agent told the user",
            len(orders) == 0 and cut[-1].type == "assistant_message",
        )
        with Journal.open(self.db) as journal:
            report = journal.verify()
            replayed = journal.replay(ORDER_SESSION)
            self.check(
                f"verify(): ok={report.ok}, {report.events_checked} events checked,"
                f" {len(report.differences)} projection differences",
                report.ok,
            )
        assert isinstance(replayed, list)
        self.say(f"replay({ORDER_SESSION}), the message list sent back to the model:")
        for line in replay_lines(replayed):
            self.say(line)
        return client

    def phase_4_5(self, client: httpx.Client) -> None:
        self.console.rule("Phase 4 · a second session, 文档助手, proves isolation")
        self.say("Sessions never see each other's rows; appending to one leaves the other as is.")
        with Journal.open(self.db) as journal:
            before = journal.messages(ORDER_SESSION)
            journal.create_session("文档助手", session_id=DOCS_SESSION)
            batch = [{"type": t, "payload": p} for t, p in DOCS_CONVERSATION]
            client.post(f"/v1/sessions/{DOCS_SESSION}/events", json={"events": batch})
            unchanged = journal.messages(ORDER_SESSION) == before
            self.console.print(isolation_table(journal, [ORDER_SESSION, DOCS_SESSION]))
        self.check(
            f"{ORDER_SESSION}'s messages are the same before and after {DOCS_SESSION}", unchanged
        )

        self.console.rule("Phase 5 · a client reconnects and resumes the stream after event 4")
        self.say("The stream resumes after the last event the client saw: no gap, no duplicate.")
        events = []
        with connect_sse(
            client,
            "GET",
            f"/v1/sessions/{ORDER_SESSION}/events/stream",
            params={"follow": "false"},
            headers={"Last-Event-ID": "4"},
        ) as source:
            events = [_event(json.loads(frame.data)) for frame in source.iter_sse() if frame.id]
        self.console.print(events_table(events, f"SSE of {ORDER_SESSION} after Last-Event-ID 4"))

    def phase_6(self, client: httpx.Client) -> None:
        self.console.rule("Phase 6 · a long task killed mid-progress, finished after restart")
        self.say("A task's lease outlives its worker; the next worker takes it over and continues.")
        self.create_agent_session(REPORT_SESSION, "订单报表")
        task = client.post(f"/v1/sessions/{REPORT_SESSION}/tasks", json={"type": "report.orders"})
        task_id = task.json()["task_id"]
        state = self._wait_task(client, task_id, lambda t: t["progress"] >= 0.4)
        pid = self.server.kill()
        self.say(
            f"SIGKILL sent to server pid {pid} with the task at {state['progress']:.0%}"
            f" (attempt {state['attempt']})."
        )
        client = self.server.start()
        done = self._wait_task(client, task_id, lambda t: t["status"] not in ("pending", "running"))
        self.say(
            f"task {done['status']} by attempt {done['attempt']}: it continued from step"
            f" {done['output']['resumed_from']} of 10; output {json.dumps(done['output'])}"
        )
        self.check(
            "the task finished once, on its second attempt, after the restart",
            done["status"] == "completed" and done["attempt"] == 2,
        )

    def _wait_task(
        self, client: httpx.Client, task_id: str, until: Any, timeout: float = 30.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state: dict[str, Any] = client.get(f"/v1/tasks/{task_id}").json()
            if until(state):
                return state
            time.sleep(0.05)
        raise RuntimeError(f"task {task_id} did not get there in {timeout} s: {state}")


@contextmanager
def _workdir(db: str | None, keep: bool) -> Iterator[tuple[Path, Path]]:
    workdir = Path(tempfile.mkdtemp(prefix="agentjournal-demo-"))
    try:
        yield (Path(db) if db else workdir / "demo.db"), workdir
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(db: str | None = None, *, keep: bool = False) -> int:
    console = Console(highlight=False)
    if db and Path(db).exists():
        console.print(f"[red]{db} exists; the demo needs a new file.[/]")
        return 2
    started = time.perf_counter()
    with _workdir(db, keep) as (path, workdir):
        demo = Demo(path, workdir, console)
        ok = demo.run()
        console.rule()
        verdict = "[green]all checks passed[/]" if ok else "[red]a check failed[/]"
        where = f"Database: {path}" + ("" if keep or db else " (removed)")
        console.print(f"{verdict} in {time.perf_counter() - started:.1f} s. {where}")
        if db and not keep:
            for suffix in ("", "-wal", "-shm", "-lock"):
                Path(str(path) + suffix).unlink(missing_ok=True)
    return 0 if ok else 1

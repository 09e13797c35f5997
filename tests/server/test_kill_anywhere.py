"""Kill-anywhere: a real `agentjournal serve --agent demo` running scripted turns for several
clients is SIGKILLed at random moments, over and over, and restarted on the same database.

After every restart (start-up recovery and resume ran before the server answered /healthz):
no session has an open turn; each turn the kill cut is finished (a pending idempotent call was
run again, a pending `place_order` got an "interrupted" error result and ran no more);
every acknowledged turn is in the journal whole, with the reply the client was given; and
`verify()` is clean. At the end: `place_order` ran at most once per call (the ledger it writes,
fsynced, has no key twice), every call has exactly one result, and a result that claims an order
was taken has its key in the ledger.

Clients send each turn with an `Idempotency-Key`; after a failed request a client retries the
same turn on the next server (its repeat answers the turn resume finished, 200) or, every other
time, gives it up and starts a new one. A turn's user message the client never saw acknowledged
is counted as cut.

A failure prints the seed; rerun with AGENTJOURNAL_KILL_SEED=<seed> to repeat the kill delays.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from agentjournal import Event, Journal
from agentjournal.demo.order_agent import PLACE_ORDER, QUERY_ORDERS, ledger_lines

SEED = int(os.environ.get("AGENTJOURNAL_KILL_SEED", "20240604"))
KILLS = 30
CLIENTS = 6
KILL_AFTER = (0.05, 0.6)  # seconds of load before each SIGKILL
TEXTS = (QUERY_ORDERS, PLACE_ORDER, "你好")
START_TIMEOUT = 30.0  # seconds for /healthz (a shared, 2-core machine)
WAIT = 30.0  # the most any single step may take before the test fails instead of hanging
INTERRUPTED = "error: interrupted"
PAGE = 10_000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One `agentjournal serve --agent demo` process on a fresh port, its output in a log."""

    def __init__(self, db: Path, ledger: Path, run: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = db.with_name(f"serve-{run}.log")
        env = {
            **os.environ,
            "AGENTJOURNAL_ORDER_DELAY": "0.05",
            "AGENTJOURNAL_ORDER_LEDGER": str(ledger),
            "PYTHONUNBUFFERED": "1",
        }
        argv = [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(db)]
        argv += ["--port", str(self.port), "--agent", "demo", "--rate-limit", "100000"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"serve exited {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        self.kill()
        raise AssertionError(f"serve did not answer /healthz in {START_TIMEOUT} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT)

    def stop(self) -> int:
        """SIGTERM (graceful: running turns finish); its exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"serve ignored SIGTERM for {WAIT} s:\n{self.log()}") from None


class Gate:
    """The URL of the server the clients should talk to; None while it is down or being
    checked. `wait(dead)` blocks until a URL other than `dead` is published (None: stop)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._url: str | None = None
        self._stopped = False

    def publish(self, url: str | None) -> None:
        with self._cond:
            self._url = url
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def wait(self, dead: str | None) -> str | None:
        with self._cond:
            while not self._stopped and (self._url is None or self._url == dead):
                self._cond.wait()
            return None if self._stopped else self._url


@dataclass(frozen=True)
class Ack:
    session_id: str
    key: str
    text: str
    reply: str
    user_seq: int
    status: int  # 201: run now; 200: the repeat of a turn finished earlier (by resume)


@dataclass
class Record:
    acks: list[Ack] = field(default_factory=list)
    failed_requests: int = 0  # requests that got no response (the server died under them)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(index: int, session_id: str, gate: Gate, record: Record) -> None:
    """Turns in a loop on its own session until the gate stops."""
    turn, failures = 0, 0
    with httpx.Client(timeout=WAIT) as http:
        url = gate.wait(None)
        while url is not None and not gate.stopped:
            text, key = TEXTS[(index + turn) % len(TEXTS)], f"c{index}-t{turn}"
            try:
                response = http.post(
                    f"{url}/v1/sessions/{session_id}/turns",
                    json={"content": text},
                    headers={"Idempotency-Key": key},
                )
            except httpx.TransportError:
                failures += 1
                with record.lock:
                    record.failed_requests += 1
                url = gate.wait(url)
                if failures % 2 == 0:  # give this turn up; otherwise retry it under its key
                    turn += 1
                continue
            turn += 1
            if response.status_code not in (200, 201):
                with record.lock:
                    record.unexpected.append(f"{key}: {response.status_code} {response.text}")
                continue
            body = response.json()
            first = body["events"][0]
            ack = Ack(session_id, key, text, body["reply"], first["seq"], response.status_code)
            with record.lock:
                record.acks.append(ack)
                if first["type"] != "user_message" or first["idempotency_key"] != key:
                    record.unexpected.append(f"{key}: the turn's first event is {first}")


def all_events(journal: Journal, session_id: str) -> list[Event]:
    events: list[Event] = []
    while True:
        page = journal.events(session_id, after=events[-1].seq if events else 0, limit=PAGE)
        events += page
        if len(page) < PAGE:
            return events


def turns(events: list[Event]) -> Iterator[list[Event]]:
    """The session's turns, each from its user message up to the next one."""
    current: list[Event] = []
    for event in events:
        if event.type == "user_message":
            if current:
                yield current
            current = [event]
        elif current:
            current.append(event)
    if current:
        yield current


def turn_problems(turn: list[Event]) -> list[str]:
    """A finished turn: user message, then calls each with exactly one result, then the final
    assistant message last; place_order's success only if no result says otherwise."""
    user = turn[0]
    where = f"{user.session_id} turn at seq {user.seq} ({user.payload['content']!r})"
    problems = []
    if turn[-1].type != "assistant_message":
        problems.append(f"{where}: not finished, ends with {turn[-1].type}")
    calls = {e.payload["call_id"]: e for e in turn if e.type == "tool_call"}
    results = collections.Counter(e.payload["call_id"] for e in turn if e.type == "tool_result")
    for call_id in calls.keys() | results.keys():
        if call_id not in calls or results[call_id] != 1:
            problems.append(f"{where}: call {call_id} has {results[call_id]} results")
    return problems


@dataclass
class Cut:
    """What a kill left: the sessions whose turn was open, and their pending calls."""

    sessions: set[str]
    pending: dict[tuple[str, str], str]  # (session id, call id) -> tool name


def inspect_cut(db: Path) -> Cut:
    with Journal.open(db) as journal:
        sessions = {s.session_id for s in journal.open_turns()}
        pending = {
            (sid, call.call_id): call.name
            for sid in sessions
            for call in journal.tool_calls(sid)
            if call.status == "pending"
        }
    return Cut(sessions, pending)


def check_restarted(
    db: Path, session_ids: list[str], acks: list[Ack], cut: Cut, ledger: Path
) -> list[str]:
    """Everything that must hold once a restarted server answers (no client talking to it)."""
    problems: list[str] = []
    keys = collections.Counter(line["key"] for line in ledger_lines(ledger))
    with Journal.open(db) as journal:
        still_open = [s.session_id for s in journal.open_turns()]
        if still_open:
            problems.append(f"turns still open after resume: {still_open}")
        events = {sid: all_events(journal, sid) for sid in session_ids}
        by_start: dict[tuple[str, int], list[Event]] = {}
        for sid, session_events in events.items():
            if journal.get_session(sid).turn_open:
                problems.append(f"{sid}: turn_open after resume")
            for turn in turns(session_events):
                problems += turn_problems(turn)
                by_start[sid, turn[0].seq] = turn
        for ack in acks:
            found = by_start.get((ack.session_id, ack.user_seq))
            if found is None:
                problems.append(f"acknowledged {ack} has no user message at seq {ack.user_seq}")
                continue
            user, last = found[0], found[-1]
            if user.payload["content"] != ack.text or user.idempotency_key != ack.key:
                problems.append(f"acknowledged {ack} but the journal has {user}")
            if last.type != "assistant_message" or last.payload["content"] != ack.reply:
                problems.append(f"acknowledged {ack} but the turn ends with {last}")
        for (sid, call_id), name in cut.pending.items():
            result = next(
                (
                    e
                    for e in events[sid]
                    if e.type == "tool_result" and e.payload["call_id"] == call_id
                ),
                None,
            )
            content = "" if result is None else str(result.payload["content"])
            is_error = result is not None and result.payload.get("is_error", False)
            if name == "place_order":
                if not (is_error and content.startswith(INTERRUPTED)):
                    problems.append(f"{sid}/{call_id}: cut place_order got {content!r}")
                if keys[f"{sid}:{call_id}"] > 1:
                    problems.append(f"{sid}/{call_id}: place_order ran again by resume")
            elif is_error or content != "42":
                problems.append(f"{sid}/{call_id}: cut {name} was not run again: {content!r}")
        report = journal.verify()
        if not report.ok:
            problems.append(f"verify: {report.to_dict()}")
    return problems


def final_problems(db: Path, session_ids: list[str], ledger: Path) -> tuple[list[str], int]:
    """The ledger against the journal, the server stopped. Also: results that say
    "interrupted"."""
    problems: list[str] = []
    lines = ledger_lines(ledger)
    keys = collections.Counter(line["key"] for line in lines)
    problems += [f"place_order ran {n} times for {key}" for key, n in keys.items() if n > 1]
    interrupted = 0
    with Journal.open(db) as journal:
        still_open = [s.session_id for s in journal.open_turns()]
        if still_open:  # the last server was stopped with SIGTERM, which lets turns finish
            problems.append(f"turns left open by a graceful stop: {still_open}")
        journal_keys = set()
        for sid in session_ids:
            calls = {c.call_id: c for c in journal.tool_calls(sid)}
            results: dict[str, list[Event]] = collections.defaultdict(list)
            for event in all_events(journal, sid):
                if event.type == "tool_result":
                    results[event.payload["call_id"]].append(event)
            for call in calls.values():
                key = f"{sid}:{call.call_id}"
                found = results[call.call_id]
                if len(found) != 1 or call.status == "pending":
                    problems.append(f"{key} ({call.name}) has {len(found)} results")
                    continue
                payload = found[0].payload
                is_error = payload.get("is_error", False)
                interrupted += is_error and payload["content"].startswith(INTERRUPTED)
                if call.name == "place_order":
                    journal_keys.add(key)
                    if not is_error and keys[key] != 1:
                        problems.append(
                            f"{key}: success {payload} but the ledger has it {keys[key]}"
                        )
                    if is_error and not payload["content"].startswith(INTERRUPTED):
                        problems.append(f"{key}: place_order failed: {payload}")
                elif is_error:
                    problems.append(f"{key}: {call.name} failed: {payload}")
        strays = set(keys) - journal_keys
        if strays:
            problems.append(f"orders taken with no tool_call in the journal: {sorted(strays)}")
        report = journal.verify()
        if not report.ok:
            problems.append(f"verify: {report.to_dict()}")
    return problems, interrupted


@pytest.mark.slow
def test_sigkill_at_random_moments_under_load_loses_no_turn_and_runs_no_order_twice(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    db, ledger = tmp_path / "agent.db", tmp_path / "ledger.jsonl"
    gate, record = Gate(), Record()
    server = Server(db, ledger, 0)
    threads: list[threading.Thread] = []
    cut_sessions = 0  # open turns found after a kill, summed over the kills
    kills_mid_turn = 0
    try:
        session_ids = []
        for index in range(CLIENTS):
            response = httpx.post(
                f"{server.url}/v1/sessions",
                json={"title": f"client {index}", "metadata": {"agent": "demo"}},
                timeout=WAIT,
            )
            assert response.status_code == 201, response.text
            session_ids.append(response.json()["session_id"])
        threads = [
            threading.Thread(target=client, args=(i, sid, gate, record), daemon=True)
            for i, sid in enumerate(session_ids)
        ]
        for thread in threads:
            thread.start()
        for run in range(1, KILLS + 1):
            gate.publish(server.url)
            time.sleep(rng.uniform(*KILL_AFTER))
            server.kill()
            gate.publish(None)
            cut = inspect_cut(db)
            cut_sessions += len(cut.sessions)
            kills_mid_turn += bool(cut.sessions)
            server = Server(db, ledger, run)
            with record.lock:
                acks, unexpected = list(record.acks), list(record.unexpected)
            problems = unexpected + check_restarted(db, session_ids, acks, cut, ledger)
            assert not problems, f"seed {SEED}, after kill {run}: {problems}\n{server.log()}"
        gate.publish(server.url)
        time.sleep(0.3)
    finally:
        gate.stop()
        for thread in threads:
            thread.join(timeout=WAIT)
        exit_code = server.stop() if server.process.poll() is None else server.process.returncode
    assert not any(thread.is_alive() for thread in threads), "a client did not stop"
    assert exit_code == 0, server.log()
    assert not record.unexpected, f"seed {SEED}: {record.unexpected}"

    problems, interrupted = final_problems(db, session_ids, ledger)
    assert not problems, f"seed {SEED}: {problems}"
    acked_keys = {(a.session_id, a.key) for a in record.acks}
    with Journal.open(db) as journal:
        users = [
            e for sid in session_ids for e in all_events(journal, sid) if e.type == "user_message"
        ]
    never_acked = [e for e in users if (e.session_id, e.idempotency_key) not in acked_keys]
    repeats = sum(a.status == 200 for a in record.acks)
    summary = (
        f"seed {SEED}: {KILLS} kills, {kills_mid_turn} cut at least one turn ({cut_sessions} cut"
        f" turns in all); {len(users)} turns, {len(record.acks)} acknowledged ({repeats} as the"
        f" repeat of a turn resume finished), {len(never_acked)} never acknowledged;"
        f" {record.failed_requests} requests died with the server; {interrupted} place_order"
        f" calls interrupted; {len(ledger_lines(ledger))} orders taken"
    )
    print(summary)
    # The load really was cut mid-turn, and resume really had something to finish: otherwise
    # this test proves nothing.
    assert kills_mid_turn >= KILLS // 2, summary
    assert interrupted > 0, summary
    assert repeats > 0, summary
    assert len(record.acks) > KILLS, summary

"""`agentjournal otel-export --follow` killed with SIGKILL 50 times mid-stream, on every backend,
while the runtime keeps writing turns and tasks: at the real OTLP/HTTP receiver no span is
missing, and a span that arrived more than once arrived as identical copies of one id (the
batch confirmed just before a kill, sent again because its checkpoint was never written).

Half the kills land right after the exporter printed its first, second or third confirmed batch
(before, during or after the checkpoint that follows it), half at a random moment after start
(start-up, restore, a read, a send). The spans expected are computed from the journal at the end
by a second exporter, with the SDK's in-memory exporter: the same mapping, an independent run.
A kill before a run's first checkpoint leaves everything since the last one to send again, so
re-sends pile up across kills in a row; each is an identical copy."""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_otel_cli import WAIT, child_env, command, run

from agentjournal import Journal
from agentjournal.demo.order_agent import QUERY_ORDERS, build
from agentjournal.otel.exporter import FeedExporter
from helpers.otlp_receiver import Receiver, otlp_receiver

KILLS = 50
SESSIONS = 3

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


class Writer(threading.Thread):
    """Runs the demo agent's turns round-robin over a few sessions, and now and then a task
    outside any turn, until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.turns = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            agent = build()
            with Journal.open(self.url) as journal:
                sessions = [agent.create_session(journal).session_id for _ in range(SESSIONS)]
                while not self.stop.is_set():
                    session = sessions[self.turns % SESSIONS]
                    text = QUERY_ORDERS if self.turns % 2 else "你好"
                    agent.run_turn(journal, session, text)
                    if self.turns % 4 == 0:
                        task = journal.create_task(session, "report", {"n": self.turns})
                        claimed = journal.claim_task("w", ["report"])
                        assert claimed is not None
                        assert claimed.task_id == task.task_id
                        journal.complete_task(task.task_id, attempt=claimed.attempt)
                    self.turns += 1
                    time.sleep(0.005)
        except BaseException as exc:
            self.failure = exc


def lines_of(child: subprocess.Popen[str]) -> tuple[queue.Queue[str | None], threading.Thread]:
    """The child's stdout lines as they come (None at its end), and the thread reading them."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def test_sigkill_mid_stream_loses_no_span_and_resends_only_identical_copies(
    journal_url: str, receiver: Receiver
) -> None:
    rng = random.Random(35)
    writer = Writer(journal_url)
    writer.start()
    after_batch = 0
    try:
        for kill in range(KILLS):
            child = subprocess.Popen(
                command(journal_url, receiver.url, "--follow", "--json"),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=child_env(),
            )
            lines, reader = lines_of(child)
            try:
                if kill % 2 == 0:
                    for _ in range(rng.randint(1, 3)):  # after this run's 1st, 2nd or 3rd batch
                        line = lines.get(timeout=WAIT)
                        assert line is not None, "the exporter ended before sending a batch"
                        assert "batch" in json.loads(line)
                    after_batch += 1
                else:
                    time.sleep(rng.uniform(0.0, 1.0))
                child.send_signal(signal.SIGKILL)
                assert child.wait(timeout=WAIT) == -signal.SIGKILL
            finally:
                child.kill()
                child.wait()
                reader.join(timeout=WAIT)
                assert child.stdout is not None
                child.stdout.close()
            assert writer.failure is None, writer.failure
    finally:
        writer.stop.set()
        writer.join(timeout=WAIT)
    assert writer.failure is None, writer.failure
    assert after_batch == KILLS // 2

    final = run(*command(journal_url, receiver.url, "--json"))  # what the last kill left
    assert final.returncode == 0, final.stderr

    with Journal.open(journal_url) as journal:
        memory = InMemorySpanExporter()
        FeedExporter(journal, memory, name="reference").run()
    expected = {
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s
        for s in memory.get_finished_spans()
    }
    received = receiver.unique()  # fails if two copies of one id differ in anything
    assert len(expected) == len(memory.get_finished_spans())  # ids are unique per span
    missing = set(expected) - set(received)
    extra = set(received) - set(expected)
    assert not missing, f"{len(missing)} spans never arrived"
    assert not extra, f"{len(extra)} spans arrived that the journal does not hold"
    for key, span in expected.items():
        got = received[key]
        parent = "" if span.parent is None else f"{span.parent.span_id:016x}"
        assert (got.name, got.parent_id, got.start_ns, got.end_ns) == (
            span.name,
            parent,
            span.start_time,
            span.end_time,
        )
    assert writer.turns * 2 < len(expected)  # every turn has 2 spans or more
    resent = len(receiver.spans) - len(received)
    print(
        f"\n{KILLS} kills: {len(expected)} spans of {writer.turns} turns, none lost;"
        f" {resent} identical re-sends"
    )

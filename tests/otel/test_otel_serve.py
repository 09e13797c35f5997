"""`serve --otlp-endpoint`: the service exports every tenant's turns beside serving them, a turn
run over HTTP and one another process wrote in a second tenant alike, and stops with the service
on SIGTERM (exit 0)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_otel_cli import WAIT, child_env

from agentjournal import Journal
from agentjournal.demo.order_agent import QUERY_ORDERS, build
from helpers.otlp_receiver import Receiver, otlp_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def wait_for(receiver: Receiver, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while len(receiver.unique()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.unique()) == count


def test_serve_exports_every_tenants_turns_until_sigterm(db_path: Path, receiver: Receiver) -> None:
    agent = build()
    with Journal.open(db_path) as journal:
        session = agent.create_session(journal).session_id
    argv = [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(db_path)]
    argv += ["--port", "0", "--agent", "demo", "--otlp-endpoint", receiver.url]
    server = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        banner = [lines.get(timeout=WAIT) for _ in range(7)]
        base = banner[0].split("serving ")[1].split(" ")[0]
        assert any(f"otel       every tenant's turns to {receiver.url}" in b for b in banner)
        request = urllib.request.Request(
            f"{base}/v1/sessions/{session}/turns",
            data=json.dumps({"content": QUERY_ORDERS}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            assert response.status in (200, 201)
        wait_for(receiver, 4)
        with Journal.open(db_path, tenant="acme") as other:
            agent.run_turn(other, agent.create_session(other).session_id, "你好")
        wait_for(receiver, 6)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=WAIT) == 0
    finally:
        server.kill()
        server.wait()
        reader.join(timeout=WAIT)
        assert server.stderr is not None
        server.stderr.close()
    tenants = {s.attributes["agentjournal.tenant"] for s in receiver.unique().values()}
    assert tenants == {"default", "acme"}
    assert len(receiver.spans) == 6


def test_the_background_export_retries_what_the_receiver_refused(
    db_path: Path, receiver: Receiver
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from agentjournal.otel.background import BackgroundExport

    agent = build()
    with Journal.open(db_path) as journal:
        agent.run_turn(journal, agent.create_session(journal).session_id, "你好")
        receiver.refuse = 2  # the first two passes fail; the service goes on
        export = BackgroundExport(
            journal, OTLPSpanExporter(endpoint=receiver.url, timeout=5), interval=0.05
        )
        export.start()
        try:
            wait_for(receiver, 2)
        finally:
            export.stop()
        assert export.passes >= 3
        assert receiver.requests == 1  # the refused requests were not taken
    assert len(receiver.spans) == 2


@pytest.mark.parametrize("interval", [0, -1.0, "1", True])
def test_the_background_export_refuses_an_interval_that_is_not_a_pause(
    db_path: Path, interval: object
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentjournal.errors import InvalidArgument
    from agentjournal.otel.background import BackgroundExport

    with (
        Journal.open(db_path) as journal,
        pytest.raises(InvalidArgument, match="interval must be a positive number"),
    ):
        BackgroundExport(journal, InMemorySpanExporter(), interval=interval)  # type: ignore[arg-type]

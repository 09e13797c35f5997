"""OpenTelemetry export: spans/s from a journal's feed to a receiver.

    .venv/bin/python bench/otel_bench.py                 # 10,000 turns (70,100 events)
    .venv/bin/python bench/otel_bench.py --turns 2000
    .venv/bin/python bench/otel_bench.py --quick         # a smoke run (rough figures)

A SQLite journal of N runtime-shaped turns (a question; a reply's text with two tool calls in one
commit; two results; the final reply with usage: 7 events and 5 spans a turn, over 100 sessions),
written at `durability="normal"`. Then `FeedExporter.run()` from the start, each run under an
exporter name of its own (so each reads the whole feed and writes its own checkpoints):

- to the SDK's in-memory exporter: the feed read, the fold, the span mapping and the SDK's span
  objects, without the wire;
- over OTLP/HTTP (protobuf) to a receiver on loopback that reads each request and answers 200
  without decoding it: what the exporter itself sustains, the receiver's cost left out;
- the same with `capture_content` (message text on every span: larger requests).

Each row: spans/s and events/s over the whole run (checkpoint writes included), and the peak RSS
of this process so far.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from rich.table import Table

from agentjournal import Journal, NewEvent
from agentjournal.otel.exporter import FeedExporter

SESSIONS = 100


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(path: Path, turns: int) -> int:
    """Write `turns` turns round-robin over SESSIONS sessions; the number of events written."""
    written = 0
    with Journal.open(path, durability="normal") as journal:
        sessions = [
            journal.create_session(f"s{i}", model="bench-model", metadata={"agent": "bench"})
            for i in range(SESSIONS)
        ]
        for n in range(turns):
            sid = sessions[n % SESSIONS].session_id
            journal.append(sid, "user_message", {"content": f"question {n}: how many orders?"})
            a, b = f"c{n}a", f"c{n}b"
            journal.append_many(
                sid,
                [
                    NewEvent("assistant_message", {"content": "Let me look."}),
                    NewEvent("tool_call", {"call_id": a, "name": "count", "arguments": "{}"}),
                    NewEvent("tool_call", {"call_id": b, "name": "sum", "arguments": '{"x":1}'}),
                ],
            )
            journal.append(sid, "tool_result", {"call_id": a, "content": "42"})
            journal.append(sid, "tool_result", {"call_id": b, "content": "7", "is_error": True})
            usage = {"prompt_tokens": 120, "completion_tokens": 9}
            journal.append(sid, "assistant_message", {"content": "42.", "usage": usage})
            written += 7
    return written + SESSIONS


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def sink() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def measure(path: Path, name: str, exporter: SpanExporter, capture: bool) -> tuple[int, int, float]:
    with Journal.open(path, durability="normal") as journal:
        started = time.perf_counter()
        report = FeedExporter(journal, exporter, name=name, capture_content=capture).run()
        seconds = time.perf_counter() - started
    return report.spans, report.events, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="200 turns: a smoke run")
    parser.add_argument("--dir", default=None, help="where the SQLite file goes")
    args = parser.parse_args()
    turns = 200 if args.quick else args.turns
    console = Console(highlight=False)
    if args.quick:
        console.print("QUICK run: rough figures, for the smoke test only")
    table = Table(title=f"OpenTelemetry export, {turns:,} turns on SQLite")
    for column in ("export", "spans", "spans/s", "events/s", "peak RSS MB"):
        table.add_column(column, justify="left" if column == "export" else "right")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "otel.db"
        events = build(path, turns)
        console.print(f"journal: {events:,} events in {SESSIONS} sessions")
        runs: list[tuple[str, str, Any, bool]] = [("SDK in-memory exporter", "mem", None, False)]
        with sink() as url:
            runs += [
                ("OTLP/HTTP, loopback", "http", url, False),
                ("OTLP/HTTP, with content", "content", url, True),
            ]
            for label, name, target, capture in runs:
                exporter: SpanExporter = (
                    InMemorySpanExporter() if target is None else OTLPSpanExporter(endpoint=target)
                )
                spans, read, seconds = measure(path, name, exporter, capture)
                exporter.shutdown()
                table.add_row(
                    label,
                    f"{spans:,}",
                    f"{spans / seconds:,.0f}",
                    f"{read / seconds:,.0f}",
                    f"{peak_rss_mb():.0f}",
                )
    console.print(table)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

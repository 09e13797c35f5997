"""A real OTLP/HTTP trace receiver on loopback, for the exporter's tests: it decodes each
`ExportTraceServiceRequest` (protobuf, optionally gzip) with the OpenTelemetry protocol package
and keeps every span it was sent, duplicates included, so a test can tell a lost span from a
re-sent one.

Why not a full backend: Arize Phoenix, which accepts OTLP and has a queryable store, needs far
more memory and start-up time than this machine's test budget allows; what the tests check is what
arrives on the wire, which this receiver shows exactly.
"""

from __future__ import annotations

import gzip
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Received:
    """One span as it arrived."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    description: str
    resource: dict[str, Any]
    scope: str
    schema_url: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.trace_id, self.span_id)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver:
    """Spans received so far (`spans`), how many requests to refuse next (`refuse`), the largest
    body it takes (`max_body`), and a
    redirect to answer every request with (`redirect`: status and location; a GET anywhere but
    /v1/traces gets a 200 page, as a proxy's sign-in page would)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[Received] = []
        self.requests = 0
        self.refuse = 0
        self.redirect: tuple[int, str] | None = None
        self.max_body = 20 * 1024 * 1024  # what the OpenTelemetry Collector takes by default
        self.url = ""

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Received(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            {a.key: _value(a.value) for a in span.attributes},
                            span.status.code,
                            span.status.message,
                            resource,
                            scope_spans.scope.name,
                            scope_spans.schema_url,
                        )
                    )
        with self.lock:
            self.spans += found
            self.requests += 1

    def unique(self) -> dict[tuple[str, str], Received]:
        """One span per (trace id, span id); AssertionError if two copies of one id differ."""
        by_id: dict[tuple[str, str], Received] = {}
        with self.lock:
            spans = list(self.spans)
        for span in spans:
            first = by_id.setdefault(span.key, span)
            assert first == span, f"two different spans with one id: {first} / {span}"
        return by_id


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            if length > receiver.max_body:
                self.send_error(413, "request body too large")
                return
            body = self.rfile.read(length)
            if receiver.redirect is not None and self.path == "/v1/traces":
                status, location = receiver.redirect
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path not in ("/v1/traces", "/v2/traces"):
                self.send_error(404)
                return
            with receiver.lock:
                refused = receiver.refuse > 0
                receiver.refuse -= refused
            if refused:
                self.send_error(400, "refused by the test")
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.take(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_GET(self) -> None:
            page = b"<html>sign in</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An exporter killed before it read the reply: the spans were taken, the reply is lost
        # (the exporter sends them again). Anything else is the test's to see.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (any free port): its `url` is the traces endpoint."""
    receiver = Receiver()
    server = _Server(("127.0.0.1", 0), _handler(receiver))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

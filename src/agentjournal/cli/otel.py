"""`otel-export`: the journal's turns as OpenTelemetry GenAI spans, sent over OTLP/HTTP."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from agentjournal.cli.app import app
from agentjournal.cli.common import (
    DbOption,
    JsonOption,
    TenantOption,
    console,
    fail,
    opened,
    print_json,
    require_extra,
)


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP endpoint: a base URL (no path) gets `/v1/traces`, as
    `OTEL_EXPORTER_OTLP_ENDPOINT` does; a URL with a path is taken as the traces URL itself."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        fail(f"--otlp-endpoint must be an http:// or https:// URL, not {endpoint!r}")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM end a --follow run after the batch in flight (exit 0)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@app.command("otel-export")
def otel_export(
    otlp_endpoint: Annotated[
        str,
        typer.Option(
            envvar="OTEL_EXPORTER_OTLP_ENDPOINT",
            help="The OTLP/HTTP receiver: a base URL (/v1/traces is added) or the traces URL"
            " (env OTEL_EXPORTER_OTLP_ENDPOINT).",
            show_default=False,
        ),
    ],
    capture_content: Annotated[
        bool,
        typer.Option(
            envvar="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            help="Put message text, tool arguments and results on the spans (off: only"
            " names, ids, models, token counts and timings leave the journal).",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(help="Keep exporting turns as they end, until Ctrl-C or SIGTERM."),
    ] = False,
    name: Annotated[
        str,
        typer.Option(
            help="The exporter's name: its checkpoint is the session otel-export.NAME (one"
            " running exporter per name)."
        ),
    ] = "default",
    service_name: Annotated[
        str, typer.Option(help="The spans' service.name (OTEL_RESOURCE_ATTRIBUTES adds more).")
    ] = "agentjournal",
    checkpoint_db: Annotated[
        str | None,
        typer.Option(
            help="Keep the checkpoint in this journal (SQLite file or postgresql:// URL)"
            " instead of --db: for exporting from a read replica. Always pair it with the"
            " same --db.",
            show_default=False,
        ),
    ] = None,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Send every turn of the tenant as OpenTelemetry spans (GenAI conventions) to an OTLP/HTTP
    receiver, from where the last run stopped (docs/observability.md).

    A turn is exported once it has ended; the position reached is kept in the journal, after the
    receiver confirmed. --json prints one line per confirmed batch, then the summary.

    Example: agentjournal otel-export --db agent.db --otlp-endpoint http://127.0.0.1:4318 --follow
    """
    require_extra(
        "otel",
        "otel-export",
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "agentjournal.otel.exporter",
    )
    from agentjournal.otel.exporter import FeedExporter, exporter_resource, otlp_http_exporter

    url = traces_url(otlp_endpoint)
    stop = threading.Event()
    sent = 0

    def on_batch(spans: int) -> None:
        nonlocal sent
        sent += spans
        if as_json:
            print_json({"batch": spans, "spans": sent})

    span_exporter = otlp_http_exporter(url)
    try:
        with ExitStack() as stack:
            stack.enter_context(_stop_on_signals(stop))
            journal = stack.enter_context(opened(db, tenant))
            checkpoints = None
            if checkpoint_db is not None:
                checkpoints = stack.enter_context(opened(checkpoint_db, tenant, create=True))
            exporter = FeedExporter(
                journal,
                span_exporter,
                name=name,
                capture_content=capture_content,
                resource=exporter_resource(tenant, name, service_name),
                checkpoints=checkpoints,
            )
            report = exporter.run(follow=follow, stop=stop, on_batch=on_batch)
    finally:
        span_exporter.shutdown()
    summary = {
        "events": report.events,
        "spans": report.spans,
        "checkpoints": report.checkpoints,
        "position": report.position,
        "open_turns": report.open_turns,
        "open_tasks": report.open_tasks,
    }
    if as_json:
        print_json(summary)
    else:
        console.print(
            f"exported {report.spans} spans from {report.events} events to {url}"
            f" ({report.open_turns} turns still open)",
            soft_wrap=True,
        )

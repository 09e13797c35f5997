"""Export beside a running service (`serve --otlp-endpoint`): one thread passes over every
tenant's feed in turn, once a second, each tenant with an exporter of its own (its checkpoint in
that tenant's `otel-export.NAME` session), all sending through one SDK span exporter.

A pass that cannot deliver (the receiver is down), or finds that another exporter of the same
name moved the checkpoint (a second `serve` over the same PostgreSQL database), logs it and tries
again on the next pass: several instances of a service can each run one, and whichever is ahead
exports; a batch two of them sent is the same batch, with the same ids. The service never stops
because its export failed.
"""

from __future__ import annotations

import logging
import threading

from opentelemetry.sdk.trace.export import SpanExporter

from agentjournal.errors import Conflict, JournalError
from agentjournal.journal import Journal
from agentjournal.otel.exporter import (
    ExportFailed,
    FeedExporter,
    check_positive,
    exporter_resource,
)

__all__ = ["BackgroundExport"]

log = logging.getLogger("agentjournal.otel")


class BackgroundExport:
    """`start()` it beside the service, `stop()` it on the way out (the pass in flight ends after
    its current batch)."""

    def __init__(
        self,
        journal: Journal,
        span_exporter: SpanExporter,
        *,
        name: str = "default",
        capture_content: bool = False,
        interval: float = 1.0,
        service_name: str = "agentjournal",
    ) -> None:
        check_positive("interval", interval)  # zero would pass over the feeds without a pause
        self.journal = journal
        self.span_exporter = span_exporter
        self.name = name
        self.capture_content = capture_content
        self.interval = interval
        self.service_name = service_name
        self.passes = 0
        self._stop = threading.Event()
        self._exporters: dict[str, FeedExporter] = {}
        self._thread = threading.Thread(target=self._loop, name="agentjournal-otel", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        self.span_exporter.shutdown()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                tenants = self.journal.tenants()
            except JournalError as exc:
                log.warning("OpenTelemetry export: cannot list the tenants: %s", exc)
                tenants = []
            for tenant in tenants:
                if self._stop.is_set():
                    break
                self._pass(tenant)
            self.passes += 1
            self._stop.wait(self.interval)

    def _pass(self, tenant: str) -> None:
        exporter = self._exporters.get(tenant)
        if exporter is None:
            exporter = FeedExporter(
                self.journal.for_tenant(tenant),
                self.span_exporter,
                name=self.name,
                capture_content=self.capture_content,
                resource=exporter_resource(tenant, self.name, self.service_name),
            )
            self._exporters[tenant] = exporter
        try:
            exporter.run(stop=self._stop)
        except ExportFailed as exc:
            log.warning("OpenTelemetry export of tenant %r: %s", tenant, exc)
        except Conflict as exc:
            log.info("OpenTelemetry export of tenant %r: %s", tenant, exc)
        except JournalError as exc:
            log.warning("OpenTelemetry export of tenant %r stopped for now: %s", tenant, exc)
        except Exception:  # a bug: logged whole, and the service goes on
            log.exception("OpenTelemetry export of tenant %r failed", tenant)

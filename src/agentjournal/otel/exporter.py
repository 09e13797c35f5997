"""The exporter: follows a tenant's global feed from its checkpoint, folds each session's events
into turns and tasks, sends the spans of every one that finished through an OpenTelemetry SDK
`SpanExporter` (OTLP/HTTP from the command line), and only then advances the checkpoint.

A turn still open when the exporter stops is named in the checkpoint; the next run reads its
events again from the session and exports it when it ends. A crash after the receiver confirmed
a batch and before the checkpoint was written sends that batch again on restart, with the same
ids (spans.py): a receiver that keeps one span per id sees each exactly once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.schemas import Schemas
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agentjournal.errors import InvalidArgument, JournalError, SessionNotFound, StorageError
from agentjournal.events import Event
from agentjournal.journal import MAX_PAGE, Journal
from agentjournal.otel.checkpoint import SESSION_PREFIX, Checkpoint, CheckpointStore
from agentjournal.otel.spans import SessionInfo, SpanRecord, task_span, turn_spans
from agentjournal.otel.turns import TURN_TYPES, FinishedTask, SessionFold, Turn

__all__ = [
    "ExportFailed",
    "ExportReport",
    "FeedExporter",
    "exporter_resource",
    "otlp_http_exporter",
    "to_readable",
]

log = logging.getLogger("agentjournal.otel")

PAGE_SIZE: Final = 500  # feed events read per round trip
BATCH_SPANS: Final = 512  # spans per export call
# About the bytes of one export call at most (captured content can make a span large): well under
# the 20 MiB the OpenTelemetry Collector takes by default, so no batch is refused for its size.
BATCH_BYTES: Final = 4 * 1024 * 1024
# Feed events read without a span to send before the checkpoint moves anyway (so that a restart
# does not read them again); a checkpoint is one small event in the journal.
CHECKPOINT_EVERY: Final = 5_000
HELD_BACK_SECONDS: Final = 30.0  # how long a run (not following) waits for a held-back feed
_KINDS: Final = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_STATUS: Final = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
_SCOPE: Final = InstrumentationScope("agentjournal.otel", None, list(Schemas)[-1].value)


class ExportFailed(JournalError, ConnectionError):
    """The span exporter could not deliver a batch (the receiver is down or refused it); the
    checkpoint did not move."""


@dataclass
class ExportReport:
    """What one run did: events read, spans the receiver confirmed, checkpoints written."""

    events: int = 0
    spans: int = 0
    checkpoints: int = 0
    position: str | None = None
    open_turns: int = 0
    open_tasks: int = 0


def exporter_resource(tenant: str, name: str, service_name: str = "agentjournal") -> Resource:
    """The spans' resource: `service.name`, and a `service.instance.id` that names this exporter
    (tenant and name) rather than the process, so that a batch sent again after a restart is
    the same batch; `OTEL_RESOURCE_ATTRIBUTES` may add to it."""
    instance = f"{tenant}/{SESSION_PREFIX}{name}"
    return Resource.create({"service.name": service_name, "service.instance.id": instance})


def otlp_http_exporter(url: str) -> SpanExporter:
    """The SDK's OTLP/HTTP span exporter to the traces `url`, over an HTTP session that refuses
    a redirect its client would follow with a GET (301, 302, 303): the spans would be dropped on
    the way and a 200 from wherever it landed (a proxy's sign-in page) taken for the receiver's
    confirmation, so the checkpoint would move past spans never received. 307 and 308, which
    send the same request again, are followed."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    def refuse_lossy_redirect(response: requests.Response, *args: object, **kwargs: object) -> None:
        if response.is_redirect and response.status_code not in (307, 308):
            raise requests.exceptions.RequestException(
                f"the OTLP endpoint {url} answered with a redirect ({response.status_code}) to"
                f" {response.headers.get('Location')!r}, which would drop the spans: give the"
                " URL it redirects to",
                response=response,
            )

    session = requests.Session()
    session.hooks["response"].append(refuse_lossy_redirect)
    return OTLPSpanExporter(endpoint=url, session=session)


def to_readable(span: SpanRecord, resource: Resource) -> ReadableSpan:
    """A span record as the SDK's exporters take it."""
    flags = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=flags)
    parent = None
    if span.parent_id is not None:
        parent = SpanContext(span.trace_id, span.parent_id, is_remote=False, trace_flags=flags)
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=span.attributes,
        kind=_KINDS[span.kind],
        status=Status(_STATUS[span.status], span.description),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=_SCOPE,
    )


class FeedExporter:
    """Exports the spans of `journal`'s tenant through `span_exporter`, from the checkpoint of
    the exporter called `name` (kept in `journal`, or in `checkpoints` when `journal` is a
    replica that cannot be written). `run()` once (until the feed is caught up) or following."""

    def __init__(
        self,
        journal: Journal,
        span_exporter: SpanExporter,
        *,
        name: str = "default",
        capture_content: bool = False,
        resource: Resource | None = None,
        page_size: int = PAGE_SIZE,
        retry_seconds: float = 1.0,
        checkpoints: Journal | None = None,
    ) -> None:
        check_positive("page_size", page_size, whole=True)
        check_positive("retry_seconds", retry_seconds)
        self.journal = journal
        self.span_exporter = span_exporter
        # The checkpoint lives in the journal exported, unless that one cannot be written (a
        # read replica): then in `checkpoints`, a journal of the same tenant elsewhere.
        self.store = CheckpointStore(journal if checkpoints is None else checkpoints, name)
        self.capture_content = capture_content
        if resource is None:
            resource = exporter_resource(journal.tenant, name)
        self.resource = resource
        self.page_size = min(page_size, MAX_PAGE)
        self.retry_seconds = retry_seconds
        self._folds: dict[str, SessionFold] = {}
        self._infos: dict[str, SessionInfo | None] = {}  # None: a session not to export
        self._copied: dict[str, int] = {}  # a fork's copied events (seq up to this) are not new
        # The checkpoint's seq while what this exporter holds in memory is that checkpoint's
        # state (it wrote it, or read it): a next run() need not read the open turns again.
        self._synced: int | None = None

    # -- the feed ---------------------------------------------------------------------------

    def run(
        self,
        *,
        follow: bool = False,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
        on_batch: Callable[[int], None] | None = None,
    ) -> ExportReport:
        """Export from the checkpoint until the feed is caught up (or, with `follow`, until
        `stop` is set). Every batch the receiver confirmed is followed by a checkpoint.
        `ExportFailed` if a batch cannot be delivered (when following, it is retried every
        `retry_seconds` until it is, or until `stop`)."""
        check_positive("poll_interval", poll_interval)
        stop = stop if stop is not None else threading.Event()
        checkpoint = self.store.load()
        if self._synced is None or self._synced != self.store.seq:
            self._restore(checkpoint)
        self._synced = None  # until the next checkpoint, memory runs ahead of the journal
        report = ExportReport(position=checkpoint.position)
        position, saved, unsaved = checkpoint.position, checkpoint.position, 0
        goal: str | None = None  # the feed's head when read, until the pages pass it
        held_back = 0.0
        while not stop.is_set():
            head = self.journal.feed_head(after=position)
            if goal is None:
                goal = head
            page = (
                []
                if head is None
                else self.journal.events_all(after=position, limit=self.page_size)
            )
            finished: list[Turn | FinishedTask] = []
            for event in page:
                position = event.position
                if event.session_id.startswith(SESSION_PREFIX):
                    continue
                unsaved += 1
                finished += self._add(event)
            report.events += len(page)
            if goal is not None and self._passed(position, goal):
                finished += self._settle(goal)
                goal = None
            spans = self._spans(finished)
            if spans and not self._send(spans, follow, stop, report, on_batch):
                return report  # stopped while the receiver was down: the checkpoint stays
            # A run that does not follow ends at the head it first read (or the next, if new
            # events came in between): writers that never pause must not keep it going.
            done = not follow and goal is None
            if spans or unsaved >= CHECKPOINT_EVERY or (done and unsaved):
                self._save(position, report)
                saved, unsaved = position, 0
            if done:
                break
            if page:
                held_back = 0.0
                continue
            if head is not None:  # committed, but held back by an older transaction
                held_back += poll_interval
                if held_back > HELD_BACK_SECONDS and not follow:
                    raise StorageError(
                        f"the feed is held back at position {position!r}: events up to"
                        f" {head!r} are committed, but a transaction that began before them has"
                        f" run for over {HELD_BACK_SECONDS:g} s; end it and run again"
                    )
            stop.wait(poll_interval)
        if follow and unsaved and saved != position:
            self._save(position, report)  # stopped: resume after what was read, not before
        elif not unsaved:
            self._synced = self.store.seq  # only the exporters' own events were read since
        report.position = position
        return report

    def _passed(self, position: str | None, goal: str) -> bool:
        return self.journal.position_key(position or "") >= self.journal.position_key(goal)

    def _settle(self, goal: str) -> list[Turn | FinishedTask]:
        """The turns that ended with a reply at or before `goal`, a head of the feed that the
        pages have now passed. Every commit up to a head is whole by then, so such a reply is
        its commit's last turn event. Not a short page: a page may end inside a newer commit (a
        reply whose calls are on the next page), and on PostgreSQL the feed holds back events
        behind an older transaction still running, so a reply can look last while its calls are
        hidden."""
        limit = self.journal.position_key(goal)
        ended: list[Turn | FinishedTask] = []
        for fold in self._folds.values():
            ended += fold.settle(lambda e: self.journal.position_key(e.position) <= limit)
        return ended

    def _add(self, event: Event) -> list[Turn | FinishedTask]:
        info = self._info(event.session_id)
        if info is None or event.seq <= self._copied.get(event.session_id, 0):
            return []
        fold = self._folds.setdefault(event.session_id, SessionFold(event.session_id))
        return fold.add(event)

    def _info(self, session_id: str) -> SessionInfo | None:
        if session_id in self._infos:
            return self._infos[session_id]
        try:
            session = self.journal.get_session(session_id)
        except SessionNotFound:  # purged since: nothing of it is exported
            info = None
        else:
            info = SessionInfo.of(
                self.journal.tenant,
                session_id,
                session.model,
                session.system_prompt,
                session.metadata,
            )
            if session.forked_at_seq is not None:
                self._copied[session_id] = session.forked_at_seq
        self._infos[session_id] = info
        return info

    def _spans(self, finished: Sequence[Turn | FinishedTask]) -> list[SpanRecord]:
        spans: list[SpanRecord] = []
        for item in finished:
            sid = item.session_id if isinstance(item, Turn) else item.task.session_id
            info = self._infos.get(sid)
            if info is None:
                continue
            if isinstance(item, Turn):
                spans += turn_spans(item, info, capture_content=self.capture_content)
            else:
                spans.append(task_span(item, info))
        return spans

    # -- sending and checkpoints ------------------------------------------------------------

    def _send(
        self,
        spans: list[SpanRecord],
        follow: bool,
        stop: threading.Event,
        report: ExportReport,
        on_batch: Callable[[int], None] | None,
    ) -> bool:
        """Deliver every span (in batches); False if `stop` came while the receiver was down."""
        for records in _batches(spans):
            batch = [to_readable(s, self.resource) for s in records]
            while self.span_exporter.export(batch) is not SpanExportResult.SUCCESS:
                if not follow:
                    raise ExportFailed(
                        f"the span exporter could not deliver {len(batch)} spans; the"
                        " checkpoint did not move (run again to send them)"
                    )
                log.warning("could not deliver %d spans; retrying", len(batch))
                if stop.wait(self.retry_seconds):
                    return False
            report.spans += len(batch)
            if on_batch is not None:
                on_batch(len(batch))
        return True

    def _save(self, position: str | None, report: ExportReport) -> None:
        turns = [(sid, f.turn[0].seq) for sid, f in self._folds.items() if f.turn]
        tasks = [t for f in self._folds.values() for t in f.tasks.values()]
        self.store.save(position, turns, tasks)
        self._synced = self.store.seq
        report.checkpoints += 1
        report.open_turns, report.open_tasks = len(turns), len(tasks)
        # What is idle need not stay in memory: a session met again is looked up again.
        for sid in [sid for sid, f in self._folds.items() if f.idle]:
            del self._folds[sid]
            self._infos.pop(sid, None)
            self._copied.pop(sid, None)

    def _restore(self, checkpoint: Checkpoint) -> None:
        """Take back what was open at the checkpoint: each open turn's events, read again from
        its session up to the checkpoint's position, and the open tasks."""
        self._folds.clear()
        self._infos.clear()
        self._copied.clear()
        if checkpoint.position is None:
            return  # nothing was read yet, so nothing is open
        limit = self.journal.position_key(checkpoint.position)
        for sid, first in checkpoint.turns:
            if self._info(sid) is None:
                continue
            events: list[Event] = []
            after = first - 1
            while True:
                page = self.journal.events(sid, after=after, limit=MAX_PAGE)
                kept = [e for e in page if self.journal.position_key(e.position) <= limit]
                events += [e for e in kept if e.type in TURN_TYPES]
                if len(kept) < len(page) or len(page) < MAX_PAGE:
                    break
                after = page[-1].seq
            fold = self._folds.setdefault(sid, SessionFold(sid))
            fold.restore_turn(events)
        for task in checkpoint.tasks:
            if self._info(task.session_id) is not None:
                fold = self._folds.setdefault(task.session_id, SessionFold(task.session_id))
                fold.tasks[task.task_id] = task


def _weight(span: SpanRecord) -> int:
    """About the bytes `span` takes in a request: its name and attributes, and some overhead."""
    size = 100 + len(span.name.encode())
    for key, value in span.attributes.items():
        size += len(key) + len(str(value).encode())
    return size


def _batches(spans: list[SpanRecord]) -> Iterator[list[SpanRecord]]:
    """`spans` in order, in batches of at most BATCH_SPANS spans and about BATCH_BYTES (a span
    larger than that alone)."""
    batch: list[SpanRecord] = []
    size = 0
    for span in spans:
        weight = _weight(span)
        if batch and (len(batch) == BATCH_SPANS or size + weight > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(span)
        size += weight
    if batch:
        yield batch


def check_positive(name: str, value: object, *, whole: bool = False) -> None:
    """Options are checked before anything is written (the checkpoint's session included)."""
    kinds = int if whole else int | float
    if not isinstance(value, kinds) or isinstance(value, bool) or not value > 0:
        wanted = "a positive whole number" if whole else "a positive number of seconds"
        raise InvalidArgument(f"{name} must be {wanted}, not {value!r}")

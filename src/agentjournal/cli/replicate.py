"""`replicate` and `replication-status`: a journal's events applied to another, exactly once
(docs/replication.md), and what a target knows of its sources."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentjournal.cli.app import app
from agentjournal.cli.common import (
    EXIT_PROBLEMS,
    DbOption,
    JsonOption,
    ProgressOption,
    TenantOption,
    console,
    errors,
    fail,
    local_time,
    opened,
    print_json,
    wants_progress,
)
from agentjournal.replication import DEFAULT_BATCH, BatchReport, ReplicationReport, replicate

__all__: list[str] = []


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` while the block runs: the batch in flight commits (or
    not, whole), and the command ends with its summary."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class _Metrics:
    """The follower's counters, written in Prometheus' text format to a file (for a node
    exporter's textfile collector) after every batch: replaced whole, never half-written."""

    def __init__(self, path: Path | None, source: str, tenant: str) -> None:
        self.path = path
        self.labels = f'source="{source}",tenant="{tenant}"'
        self.values: dict[str, float] = {
            "agentjournal_replication_events_read_total": 0,
            "agentjournal_replication_events_appended_total": 0,
            "agentjournal_replication_events_skipped_total": 0,
            "agentjournal_replication_purges_total": 0,
            "agentjournal_replication_batches_total": 0,
            "agentjournal_replication_errors_total": 0,
            "agentjournal_replication_lag_seconds": 0,
            "agentjournal_replication_last_batch_timestamp_seconds": 0,
        }

    def batch(self, batch: BatchReport) -> None:
        v = self.values
        v["agentjournal_replication_events_read_total"] += batch.events_read
        v["agentjournal_replication_events_appended_total"] += batch.appended
        v["agentjournal_replication_events_skipped_total"] += batch.skipped
        v["agentjournal_replication_purges_total"] += batch.purges_followed
        v["agentjournal_replication_batches_total"] += 1
        v["agentjournal_replication_lag_seconds"] = batch.lag_ms / 1000
        v["agentjournal_replication_last_batch_timestamp_seconds"] = time.time()
        self.write()

    def error(self) -> None:
        self.values["agentjournal_replication_errors_total"] += 1
        self.write()

    def write(self) -> None:
        if self.path is None:
            return
        lines = []
        for name, value in self.values.items():
            kind = "counter" if name.endswith("_total") else "gauge"
            lines += [f"# TYPE {name} {kind}", f"{name}{{{self.labels}}} {value:g}"]
        partial = self.path.with_name(f".{self.path.name}.partial")
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(partial, self.path)


@app.command("replicate")
def replicate_(
    source: Annotated[str, typer.Argument(help="The source journal: SQLite file or URL.")],
    target: Annotated[str, typer.Argument(help="The target journal: SQLite file or URL.")],
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="The target tenant (default: the source tenant's name)."),
    ] = None,
    source_tenant: Annotated[
        str, typer.Option("--source-tenant", help="The source tenant to read.")
    ] = "default",
    follow: Annotated[
        bool,
        typer.Option("--follow", help="Keep going: apply new events as they commit, until Ctrl-C."),
    ] = False,
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            min=1,
            max=10_000,
            help="Events per target transaction once caught up (larger while behind).",
        ),
    ] = DEFAULT_BATCH,
    metrics_file: Annotated[
        Path | None,
        typer.Option(
            "--metrics-file",
            help="With --follow: keep Prometheus metrics (lag, counts) in this file.",
        ),
    ] = None,
    as_json: JsonOption = False,
    show_progress: ProgressOption = None,
) -> None:
    """Apply the source's events to the target, each exactly once, from where the target says
    this source stopped.

    The target keeps the source's position in the same transaction as the events it counts, so
    a replicator stopped at any instant (Ctrl-C, SIGKILL, a lost connection) resumes with no gap
    and no duplicate. Sessions keep their ids; one whose id is another session's in the target
    is a conflict, and one the target refuses an event of is stopped: both are reported and
    skipped while the rest goes on (exit 1). Purges at the source are followed. Without
    --follow it catches up and prints a summary; with it, it keeps going and prints each batch.

    Example: agentjournal replicate edge.db postgresql://central/agents --tenant laptop-7
    """
    if metrics_file is not None and not metrics_file.parent.is_dir():
        fail(f"no folder {str(metrics_file.parent)!r} to write {str(metrics_file)!r} in")
    stop = threading.Event()
    show = wants_progress(show_progress, as_json)
    with (
        opened(source, source_tenant) as source_journal,
        opened(target, tenant or source_tenant, create=True) as target_journal,
        _stop_on_signals(stop),
    ):
        metrics = _Metrics(metrics_file, source_journal.source_id(), target_journal.tenant)
        metrics.write()
        shown = _Shown(show and not follow, follow, as_json)

        def on_batch(report: BatchReport) -> None:
            metrics.batch(report)
            shown.batch(report)

        def on_error(exc: BaseException, pause: float) -> None:
            metrics.error()
            errors.print(
                f"[yellow]retrying in {pause:.1f} s:[/] {escape(' '.join(str(exc).split()))}",
                soft_wrap=True,
            )

        with shown:
            report = replicate(
                source_journal,
                target_journal,
                batch_size=batch,
                follow=follow,
                stop=stop,
                on_batch=on_batch,
                on_error=on_error,
            )
    _summary(report, source, target, as_json)
    if report.conflicts or report.stopped:
        raise typer.Exit(EXIT_PROBLEMS)


class _Shown:
    """How batches are shown: a live line on stderr while catching up, a line per batch when
    following (JSON lines with --json)."""

    def __init__(self, live: bool, lines: bool, as_json: bool) -> None:
        self.live = live
        self.lines = lines
        self.as_json = as_json
        self.events = 0
        self.status: Any = None

    def __enter__(self) -> _Shown:
        if self.live:
            self.status = errors.status("replicating")
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def batch(self, report: BatchReport) -> None:
        self.events += report.events_read
        if self.status is not None:
            self.status.update(f"replicating: {self.events:,} events, lag {report.lag_ms:,} ms")
        if not self.lines:
            return
        if self.as_json:
            print_json({"batch": _batch_dict(report)})
        else:
            notes = [f"{len(report.conflicts)} conflict(s)"] if report.conflicts else []
            notes += [f"stopped {sid}: {why}" for sid, why in report.stopped.items()]
            notes += [f"purged {sid}" for sid in report.purged]
            console.print(
                f"{report.events_read:,} events ({report.appended:,} appended) up to"
                f" {report.position}, lag {report.lag_ms:,} ms"
                + "".join(f"; {escape(n)}" for n in notes),
                soft_wrap=True,
            )


def _batch_dict(report: BatchReport) -> dict[str, Any]:
    return {
        "events_read": report.events_read,
        "appended": report.appended,
        "skipped": report.skipped,
        "purges_followed": report.purges_followed,
        "conflicts": report.conflicts,
        "stopped": report.stopped,
        "purged": report.purged,
        "position": report.position,
        "lag_ms": report.lag_ms,
    }


def _summary(report: ReplicationReport, source: str, target: str, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "source_id": report.source_id,
                "source_tenant": report.source_tenant,
                "tenant": report.tenant,
                "batches": report.batches,
                "events_read": report.events_read,
                "appended": report.appended,
                "skipped": report.skipped,
                "purges_followed": report.purges_followed,
                "conflicts": report.conflicts,
                "stopped": report.stopped,
                "purged": report.purged,
                "position": report.position,
            }
        )
        return
    console.print(
        f"replicated {report.events_read:,} events ({report.appended:,} appended,"
        f" {report.skipped:,} skipped, {report.purges_followed:,} purges followed) of"
        f" {report.source_id} tenant {report.source_tenant!r} into tenant {report.tenant!r}"
        f" in {report.batches:,} batches; position {report.position or '(start)'}",
        soft_wrap=True,
    )
    for sid in report.conflicts:
        errors.print(
            f"conflict: session {escape(sid)} is another session's in the target; skipped",
            soft_wrap=True,
        )
    for sid, why in report.stopped.items():
        errors.print(f"stopped: session {escape(sid)}: {escape(why)}", soft_wrap=True)


@app.command("replication-status")
def replication_status(
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """What this journal knows as a replication target: each source's position, events applied
    and last batch, and every replicated session in conflict, stopped or purged (exit 1 if any
    is in conflict or stopped).

    Example: agentjournal replication-status --db postgresql://central/agents --tenant laptop-7
    """
    with opened(db, tenant) as journal:
        sources = journal.replication_status()
        # ok is the rule: list only what needs a look
        troubled = [row for row in journal.replicated_sessions() if row.state != "ok"]
        own = journal.source_id()
    if as_json:
        print_json(
            {
                "source_id": own,
                "sources": [
                    {
                        "source_id": p.source_id,
                        "source_tenant": p.source_tenant,
                        "position": p.position,
                        "purge_position": p.purge_position,
                        "events": p.events,
                        "updated_at": p.updated_at,
                    }
                    for p in sources
                ],
                "sessions": [
                    {
                        "session_id": r.session_id,
                        "source_id": r.source_id,
                        "state": r.state,
                        "error": r.error,
                    }
                    for r in troubled
                ],
            }
        )
    else:
        console.print(f"this journal's own source id: {own}")
        table = Table("source", "source tenant", "position", "events", "last batch")
        for p in sources:
            table.add_row(
                p.source_id, p.source_tenant, p.position, f"{p.events:,}", local_time(p.updated_at)
            )
        console.print(table if sources else "no source replicates into this tenant")
        for r in troubled:
            why = f": {r.error}" if r.error else ""
            console.print(
                f"{r.state}: session {escape(r.session_id)} from {r.source_id}{escape(why)}",
                soft_wrap=True,
            )
    if any(r.state in ("conflict", "stopped") for r in troubled):
        raise typer.Exit(EXIT_PROBLEMS)

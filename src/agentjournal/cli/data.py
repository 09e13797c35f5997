"""`migrate`, `verify`, `backup`, `restore`, `export`, `import`: keeping the data sound and
moving it."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import DownloadColumn, MofNCompleteColumn, TextColumn
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
    opened,
    print_json,
    progress,
    wants_progress,
)
from agentjournal.errors import Conflict, JournalError
from agentjournal.journal import Journal
from agentjournal.verify import VerifyReport

if TYPE_CHECKING:
    from agentjournal.backup import CopyReport

__all__: list[str] = []


@app.command()
def verify(
    db: DbOption = "agent.db",
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant (default: every tenant).")
    ] = None,
    rebuild: Annotated[
        bool, typer.Option(help="Rewrite the projections that differ from the journal's fold.")
    ] = False,
    as_json: JsonOption = False,
    show_progress: ProgressOption = None,
) -> None:
    """Check every projection against the fold of the journal, and the database's integrity.

    Exit 0: clean (or, with --rebuild, everything found was repaired); 1: differences, journal
    errors or integrity problems remain; 2: could not check. Progress, session by session,
    goes to stderr.

    Example: agentjournal verify --db agent.db --rebuild
    """
    reports: dict[str, VerifyReport] = {}
    remaining = False
    count = (MofNCompleteColumn(), TextColumn("sessions"))
    with opened(db) as journal, progress(wants_progress(show_progress, as_json), *count) as shown:

        def check(description: str, scoped: Journal, repair: bool = False) -> VerifyReport:
            task = shown.add_task(description, total=None)
            return scoped.verify(
                rebuild=repair,
                progress=lambda done, total: shown.update(task, completed=done, total=total),
            )

        tenants = [tenant] if tenant is not None else journal.tenants() or ["default"]
        for name in tenants:
            scoped = journal.for_tenant(name)
            reports[name] = check(f"verifying tenant {escape(name)}", scoped, rebuild)
            # After a rebuild, what is left is what a second pass still finds.
            if rebuild and not reports[name].ok:
                after = check(f"checking tenant {escape(name)} again", scoped)
            else:
                after = reports[name]
            remaining = remaining or not after.ok
    if as_json:
        print_json({"ok": not remaining, "tenants": {t: r.to_dict() for t, r in reports.items()}})
    else:
        _print_verify(reports, rebuild)
    if remaining:
        raise typer.Exit(EXIT_PROBLEMS)


def _print_verify(reports: dict[str, VerifyReport], rebuild: bool) -> None:
    table = Table("tenant", "sessions", "events", "differences", "journal errors", "result")
    for name, report in reports.items():
        result = "[green]ok[/]" if report.ok else "[red]problems[/]"
        if rebuild and report.rebuilt:
            result = f"[yellow]rebuilt {len(report.rebuilt)} session(s)[/]"
        table.add_row(
            name,
            f"{report.sessions_checked:,}",
            f"{report.events_checked:,}",
            str(len(report.differences)),
            str(len(report.journal_errors)),
            result,
        )
    console.print(table)
    for name, report in reports.items():
        for problem in report.integrity:
            console.print(f"[red]integrity[/] ({name}): {problem}")
        for error in report.journal_errors:
            console.print(f"[red]journal[/] ({name}): {error}")
        for d in report.differences[:50]:
            console.print(
                f"[yellow]{d.table}[/] {d.key} {d.field}: stored {d.stored!r},"
                f" journal says {d.expected!r}"
            )


@app.command()
def migrate(
    db: DbOption = "agent.db",
    grant: Annotated[
        list[str] | None,
        typer.Option(
            help="PostgreSQL: a role the application connects as, to get the row privileges it"
            " needs and nothing more (repeatable)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create the journal at --db, or bring its schema to this version, then exit.

    On PostgreSQL run it as the role that owns the schema (in the URL), before the application
    starts and after every upgrade; the application connects as a role that owns nothing and
    cannot bypass row-level security. Roles granted once are granted again by later migrations.

    Example: agentjournal migrate --db 'postgresql://journal_owner@db/agents' --grant journal_app
    """
    roles = grant or []
    Journal.migrate(db, grant_to=roles)
    if as_json:
        print_json({"ok": True, "granted": roles})
    else:
        granted = f"; granted to {', '.join(roles)}" if roles else ""
        # Not the URL: it may hold a password.
        console.print(f"[green]the journal's schema is up to date[/]{escape(granted)}")


@app.command()
def backup(
    destination: Annotated[Path, typer.Argument(help="The file to write (must not exist).")],
    db: DbOption = "agent.db",
    overwrite: Annotated[bool, typer.Option(help="Replace an existing destination.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Copy a live SQLite journal to DESTINATION with SQLite's online backup API.

    Writers carry on meanwhile; the copy is one consistent snapshot (the WAL included) and passes
    SQLite's integrity check before it is renamed into place. PostgreSQL: use pg_dump.

    Example: agentjournal backup /backups/agent-2026-12-02.db --db agent.db
    """
    from agentjournal.backup import backup as take_backup

    if destination.exists() and not overwrite:
        fail(f"{str(destination)!r} exists; choose a new name or pass --overwrite")
    if not destination.parent.is_dir():
        fail(f"no folder {str(destination.parent)!r} to write {str(destination)!r} in")
    with _status(f"backing up {db}", quiet=as_json):
        report = take_backup(db, destination, overwrite=overwrite)
    _print_copy(report, "backed up", as_json)


@app.command()
def restore(
    backup_file: Annotated[Path, typer.Argument(help="A file `agentjournal backup` wrote.")],
    db: DbOption = "agent.db",
    force: Annotated[
        bool, typer.Option(help="Replace a target that already holds events.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Restore a backup into the SQLite journal at --db (created if missing).

    The backup is integrity-checked first; a target holding events is replaced only with --force.
    Stop the target's writers first: what they write after the restore started is lost.

    Example: agentjournal restore /backups/agent-2026-12-02.db --db agent.db --force
    """
    from agentjournal.backup import restore as restore_backup

    try:
        with _status(f"restoring into {db}", quiet=as_json):
            report = restore_backup(backup_file, db, force=force)
    except Conflict as exc:  # the target holds events: the library names its argument, not ours
        fail(str(exc).replace("restore with force", "pass --force"))
    _print_copy(report, "restored", as_json)


@contextlib.contextmanager
def _status(message: str, *, quiet: bool) -> Iterator[None]:
    if quiet:
        yield
        return
    with errors.status(message):
        yield


def _print_copy(report: CopyReport, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "path": report.path,
                "bytes": report.bytes,
                "events": report.events,
                "sessions": report.sessions,
                "seconds": round(report.seconds, 3),
            }
        )
        return
    console.print(
        f"{verb} {report.events:,} events of {report.sessions:,} sessions to {report.path}"
        f" ({report.bytes / 2**20:,.1f} MiB, integrity ok, {report.seconds:.1f} s)"
    )


@contextlib.contextmanager
def _progress(
    description: str, *, total: int | None, in_bytes: bool, quiet: bool
) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; yields `update(completed)`."""
    count = DownloadColumn() if in_bytes else TextColumn("{task.completed:,} events")
    with progress(not quiet, count) as display:
        task = display.add_task(description, total=total)
        yield lambda completed: display.update(task, completed=completed)


@app.command("export")
def export(
    destination: Annotated[
        str, typer.Argument(help="File to write, or - for standard output.")
    ] = "-",
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    session: Annotated[
        list[str] | None, typer.Option("--session", help="Only this session (repeatable).")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing file.")] = False,
) -> None:
    """Write the tenant's events as JSON Lines, one event a line, streaming.

    Each line is the event as the HTTP API shows it; `import` reads it back. Memory stays flat
    whatever the size; a file is written beside its name and renamed when complete; progress
    goes to stderr.

    Example: agentjournal export events.jsonl --db agent.db --tenant acme
    """
    from agentjournal.transfer import export_lines

    target = None if destination == "-" else Path(destination)
    if target is not None and target.exists() and not overwrite:
        fail(f"{destination!r} exists; choose a new name or pass --overwrite")
    if target is not None and not target.parent.is_dir():
        fail(f"no folder {str(target.parent)!r} to write {destination!r} in")
    with opened(db, tenant) as journal, contextlib.ExitStack() as stack:
        if target is None:
            out: IO[str] = sys.stdout
        else:
            partial = target.with_name(f".{target.name}.partial")
            stack.callback(partial.unlink, missing_ok=True)
            out = stack.enter_context(partial.open("w", encoding="utf-8"))
        update = stack.enter_context(
            _progress("exporting", total=None, in_bytes=False, quiet=target is None)
        )
        written = 0
        for written, line in enumerate(export_lines(journal, session), start=1):
            out.write(line + "\n")
            if written % 1000 == 0:
                update(written)
        update(written)
        out.flush()
        if target is not None:
            out.close()
            partial.replace(target)
            errors.print(f"exported {written:,} events to {target}")


@app.command("import")
def import_(
    source: Annotated[str, typer.Argument(help="A JSON Lines export, or - for standard input.")],
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Read a JSON Lines export into the tenant, keeping each event's session, seq and time.

    Every line passes the same checks as an append, all in one transaction: a corrupt line stops
    the import with its line number (exit 2) and nothing is written. The file's sessions must not
    exist here yet, unless the file continues one at its next seq.

    Example: agentjournal import events.jsonl --db copy.db --tenant acme
    """
    from agentjournal.transfer import import_lines

    with contextlib.ExitStack() as stack:
        if source == "-":
            # The write may run twice (PostgreSQL reruns a transaction a lost connection rolled
            # back), so standard input is kept in a file it can read again.
            spool = stack.enter_context(tempfile.TemporaryFile())
            shutil.copyfileobj(sys.stdin.buffer, spool)
            size = spool.tell()

            def open_lines() -> Iterator[bytes]:
                spool.seek(0)
                yield from spool
        else:
            path = Path(source)
            if not path.is_file():
                fail(f"no file {source!r}")
            size = path.stat().st_size

            def open_lines() -> Iterator[bytes]:
                with path.open("rb") as lines:
                    yield from lines

        read = 0

        def counted() -> Iterator[bytes]:
            nonlocal read
            read = 0
            for line in open_lines():
                read += len(line)
                yield line

        journal = stack.enter_context(opened(db, tenant, create=True))
        update = stack.enter_context(
            _progress("importing", total=size, in_bytes=True, quiet=as_json)
        )
        try:
            report = import_lines(journal, counted, progress=lambda lines: update(read))
        except JournalError as exc:
            fail(f"{exc}; nothing was imported")
        update(size)
    if as_json:
        print_json(
            {
                "events": report.events,
                "sessions_created": report.sessions_created,
                "sessions_extended": report.sessions_extended,
            }
        )
    else:
        console.print(
            f"imported {report.events:,} events: {report.sessions_created:,} new sessions,"
            f" {report.sessions_extended:,} continued"
        )

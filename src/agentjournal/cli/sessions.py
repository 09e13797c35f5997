"""`sessions`, `show`, `replay`, `tail`, `compact`, `purge`: reading sessions, acting on one.

People get rich text on stdout. With `--json` a command prints one JSON document on one line (an
array for `sessions`, an object for the others), except `tail --json`, which is a stream: one
event object a line. Errors go to stderr; exit codes as in `common`.
"""

from __future__ import annotations

import getpass
import itertools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Literal

import typer
from rich.text import Text

from agentjournal.cli.app import app
from agentjournal.cli.common import (
    EXIT_OK,
    EXIT_PROBLEMS,
    DbOption,
    JsonOption,
    TenantOption,
    console,
    fail,
    opened,
    print_json,
)
from agentjournal.cli.render import (
    event_line,
    message_count,
    replayed_messages,
    session_header,
    sessions_table,
    tasks_table,
    timeline,
)
from agentjournal.events import Event
from agentjournal.journal import MAX_PAGE, Journal
from agentjournal.projection import Session, Task
from agentjournal.transfer import committed_events

SessionArgument = Annotated[
    str, typer.Argument(metavar="SESSION", help="The session id.", show_default=False)
]


# -- sessions ---------------------------------------------------------------------------------


@app.command("sessions")
def list_sessions(
    status: Annotated[
        Literal["active", "archived", "deleted", "all"] | None,
        typer.Option(help="Which sessions (default: active and archived)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many.")] = 50,
    search: Annotated[
        str | None,
        typer.Option(
            help="Only sessions whose title or id contains this (any case, at most 200 characters)."
        ),
    ] = None,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """List sessions, most recent activity first; exit 1 if none matched.

    --json prints one array of session objects.

    Example: agentjournal sessions --db agent.db --status all --search refund --limit 20
    """
    with opened(db, tenant) as journal:
        found, sources = _matching_sessions(journal, status, limit, search)
    if as_json:
        print_json([{**s.to_dict(), "source_id": sources.get(s.session_id)} for s in found])
    elif found:
        console.print(sessions_table(found, sources))
    else:
        typer.echo("no sessions matched", err=True)
    if not found:
        raise typer.Exit(EXIT_PROBLEMS)


def _matching_sessions(
    journal: Journal, status: str | None, limit: int, search: str | None
) -> tuple[list[Session], dict[str, str]]:
    """The journal matches `search`; this only pages, since `--limit` may pass a page's size.
    With the sessions, the source each replicated one came from (one lookup a page)."""
    found: list[Session] = []
    sources: dict[str, str] = {}
    cursor: str | None = None
    while len(found) < limit:
        size = min(MAX_PAGE, limit - len(found))
        page = journal.sessions(status=status, limit=size, cursor=cursor, search=search)
        found += page
        sources.update(journal.session_sources([s.session_id for s in page]))
        if len(page) < size:
            break
        cursor = page[-1].last_position
    return found, sources


# -- show -------------------------------------------------------------------------------------


_WINDOW = 100  # events shown by --before, --around and --after without --last
_PAGE = 50  # events shown with no option: the newest, where a chat opens


@app.command()
def show(
    session_id: SessionArgument,
    last: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_PAGE,
            help="Only the newest N events (with --before, the N before that seq; with "
            "--after, the N after it; with --around, N events around it).",
            show_default=False,
        ),
    ] = None,
    before: Annotated[
        int | None,
        typer.Option(min=1, help="Events below this seq (100, or --last).", show_default=False),
    ] = None,
    after: Annotated[
        int | None,
        typer.Option(
            min=0, help="Events above this seq, oldest first (100, or --last).", show_default=False
        ),
    ] = None,
    around: Annotated[
        int | None,
        typer.Option(min=1, help="Events around this seq (100, or --last).", show_default=False),
    ] = None,
    all_events: Annotated[
        bool, typer.Option("--all", help="Every event, however long the session.")
    ] = False,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Show a session as a chat: messages, tool calls under their turn, then its tasks.

    Without an option it shows the newest 50 events, and says on stderr how to see more when
    there are more. A long session is read in part with --last, --before, --after and --around:
    each reads only the events it shows; --all reads them all. --json prints {session, events,
    tool_calls, tasks} for the same events.

    Example: agentjournal show sess_abc123 --last 50 --db agent.db
    """
    given = (("--before", before), ("--after", after), ("--around", around))
    cursors = [name for name, value in given if value is not None]
    if len(cursors) > 1:
        fail(f"give {' or '.join(cursors)}, not both")
    if all_events and (cursors or last is not None):
        fail("--all shows every event: give it without --last, --before, --after or --around")
    with opened(db, tenant) as journal:
        session = journal.get_session(session_id)
        paged = False
        if around is not None:
            events = journal.events(session_id, around=around, limit=last or _WINDOW)
        elif after is not None:
            events = journal.events(session_id, after=after, limit=last or _WINDOW)
        elif before is not None or last is not None:
            events = journal.events(session_id, before=before, last=last or _WINDOW)
        elif not all_events and session.last_seq > _PAGE:
            events = journal.events(session_id, last=_PAGE)
            paged = True
        else:
            events = list(_all_events(journal, session_id, 0))
        windowed = paged or cursors != [] or last is not None
        if windowed:
            call_ids = {e.payload["call_id"] for e in events if e.type in _CALL_EVENTS}
            calls = journal.tool_calls(session_id, call_ids=call_ids) if call_ids else []
        else:
            calls = journal.tool_calls(session_id)
        tasks = _all_tasks(journal, session_id)
    if paged and events:
        # On stderr: for the person reading; a script's stdout stays the document.
        typer.echo(
            f"showing the newest {len(events)} of {session.last_seq:,} events; for more:"
            f" --last N, --before {events[0].seq}, --after SEQ, or --all",
            err=True,
        )
    if as_json:
        print_json(
            {
                "session": session.to_dict(),
                "events": [event.to_dict() for event in events],
                "tool_calls": [call.to_dict() for call in calls],
                "tasks": [task.to_dict() for task in tasks],
            }
        )
        return
    messages = None if windowed else message_count(events)
    console.print(session_header(session, messages, len(calls), len(tasks)))
    if windowed:
        shown = f"events #{events[0].seq}-#{events[-1].seq}" if events else "no events"
        console.print(Text(f"showing {shown} of {session.last_seq}", style="dim"))
    console.print()
    console.print(timeline(events, {call.call_id: call for call in calls}))
    if tasks:
        console.print()
        console.print(Text("Tasks", style="bold"))
        console.print(tasks_table(tasks))


_CALL_EVENTS = ("tool_call", "tool_result")


def _all_events(journal: Journal, session_id: str, after: int) -> Iterator[Event]:
    while True:
        page = journal.events(session_id, after=after, limit=MAX_PAGE)
        yield from page
        if len(page) < MAX_PAGE:
            return
        after = page[-1].seq


def _all_tasks(journal: Journal, session_id: str) -> list[Task]:
    tasks: list[Task] = []
    after: str | None = None
    while True:
        page = journal.tasks(session_id=session_id, limit=MAX_PAGE, after=after)
        tasks += page
        if len(page) < MAX_PAGE:
            return tasks
        after = page[-1].task_id


# -- replay -----------------------------------------------------------------------------------


@app.command()
def replay(
    session_id: SessionArgument,
    until: Annotated[
        int | None, typer.Option(min=1, help="As of this seq (time travel).", show_default=False)
    ] = None,
    format: Annotated[
        Literal["openai", "anthropic", "responses"],
        typer.Option(help="The message shape (responses: Responses API input items)."),
    ] = "openai",
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Print the messages a model would get for the session, folded from its events.

    --json prints exactly what Journal.replay returns: a message list, or {system, messages}.

    Example: agentjournal replay sess_abc123 --until 40 --format anthropic --json
    """
    with opened(db, tenant) as journal:
        replayed = journal.replay(session_id, until=until, format=format)
    if as_json:
        print_json(replayed)
        return
    console.print(replayed_messages(replayed))


# -- tail -------------------------------------------------------------------------------------


class _Stopped(Exception):
    """Ctrl-C or SIGTERM: time to stop following."""


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `_Stopped` in the main thread while the block runs; SIGINT too,
    because a shell starts background jobs with it ignored and `tail` promises to end on it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; elsewhere the caller stops us
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@app.command()
def tail(
    session_id: Annotated[
        str | None,
        typer.Argument(metavar="SESSION", help="The session id (or --all).", show_default=False),
    ] = None,
    all_sessions: Annotated[
        bool, typer.Option("--all", help="Every session of the tenant, in feed (position) order.")
    ] = False,
    after: Annotated[
        str | None,
        typer.Option(
            help="Start after this seq (a session) or position (--all); default: the beginning.",
            show_default=False,
        ),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_PAGE,
            help="Start with the session's newest N events (instead of --after).",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option(help="Keep printing events as they commit, until Ctrl-C or SIGTERM.")
    ] = True,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Print a session's events (or every session's) after a point, then live ones, a line each.

    --json prints one event object a line.
    Ctrl-C, SIGTERM and the event that deletes the session end it with exit 0.

    Example: agentjournal tail sess_abc123 --last 20 --db agent.db
    """
    if (session_id is None) == (not all_sessions):
        fail("give a session id or --all (not both)")
    if last is not None and (all_sessions or after is not None):
        fail("--last reads a session's newest events: give it a session id and no --after")
    seq = 0
    if session_id is not None:
        try:
            seq = int(after or 0)
        except ValueError:
            fail(f"--after must be a seq (a whole number) when tailing a session, not {after!r}")
    try:
        with _stop_on_signals(), opened(db, tenant) as journal:
            events: Iterator[Event]
            newest: list[Event] = []
            if session_id is not None and last is not None:
                newest = journal.events(session_id, last=last)
                seq = newest[-1].seq if newest else 0
            if session_id is None:
                events = (
                    journal.subscribe_all(after=after)
                    if follow
                    else committed_events(journal, after)
                )
            elif follow:
                events = journal.subscribe(session_id, after=seq)
            else:
                events = _all_events(journal, session_id, seq)
            for event in itertools.chain(newest, events):
                if as_json:
                    print_json(event.to_dict())
                else:
                    _print_line(event_line(event, all_sessions))
    except _Stopped:
        raise typer.Exit(EXIT_OK) from None
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep the interpreter's final flush
        # of stdout from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(EXIT_OK) from None


def _print_line(line: Text) -> None:
    try:
        console.print(line, soft_wrap=True)
    except SystemExit:  # how rich answers a closed pipe (stdout already points to devnull)
        raise BrokenPipeError from None


# -- compact ----------------------------------------------------------------------------------


@app.command()
def compact(
    session_id: SessionArgument,
    until: Annotated[
        int, typer.Option(help="The last seq the summary replaces.", show_default=False)
    ],
    summary: Annotated[
        str, typer.Option(help="What the model gets instead of those events.", show_default=False)
    ],
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Replace the model's context up to a seq with a summary (appends context_compacted).

    The transcript keeps every message; replay starts from the summary. --json prints the event.

    Example: agentjournal compact sess_abc123 --until 40 --summary "The user wants a refund."
    """
    with opened(db, tenant) as journal:
        event = journal.compact(session_id, until, summary)
    if as_json:
        print_json(event.to_dict())
    else:
        console.print(event_line(event, with_session=False), soft_wrap=True)


# -- purge ------------------------------------------------------------------------------------


def _default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except OSError:  # no login name (a container without one)
        return "cli"


@app.command()
def purge(
    session_id: SessionArgument,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask (needed when stdin is not a terminal).")
    ] = False,
    actor: Annotated[
        str | None,
        typer.Option(help="Who asked, for the audit row (default: cli:<login name>)."),
    ] = None,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Delete a session and everything in it for good (privacy); an audit row records it.

    The audit row keeps who, when and how many events, never content.
    Without --yes it asks, and refuses (exit 1) if not confirmed or stdin is not a terminal.
    --json prints {session_id, events_deleted, actor}.

    Example: agentjournal purge sess_abc123 --yes --actor "support ticket 4711"
    """
    who = actor if actor is not None else _default_actor()
    with opened(db, tenant) as journal:
        session = journal.get_session(session_id)
        if not yes:
            _confirm_purge(session)
        deleted = journal.purge_session(session_id, actor=who)
    if as_json:
        print_json({"session_id": session_id, "events_deleted": deleted, "actor": who})
    else:
        console.print(
            Text(f"purged {session_id}: {deleted} events deleted (audit row kept, actor {who})")
        )


def _confirm_purge(session: Session) -> None:
    if not sys.stdin.isatty():
        fail("refusing to purge without --yes: stdin is not a terminal to ask on", EXIT_PROBLEMS)
    question = (
        f"Purge {session.session_id} ({session.title or 'untitled'}, {session.event_count}"
        " events)? It cannot be undone"
    )
    if not typer.confirm(question, default=False):
        fail("not purged", EXIT_PROBLEMS)

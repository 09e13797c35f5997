"""`sessions`, `show`, `replay`, `tail`, `compact`, `purge`: reading sessions, acting on one.

People get rich text on stdout. With `--json` a command prints one JSON document on one line (an
array for `sessions`, an object for the others), except `tail --json`, which is a stream: one
event object a line. Errors go to stderr; exit codes as in `common`.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any, Literal

import typer
from rich import box
from rich.progress_bar import ProgressBar
from rich.table import Table
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
    local_time,
    opened,
    print_json,
)
from agentjournal.events import TASK_TYPES, Event
from agentjournal.journal import MAX_PAGE, Journal
from agentjournal.projection import Session, Task, ToolCall

SessionArgument = Annotated[
    str, typer.Argument(metavar="SESSION", help="The session id.", show_default=False)
]
_ROLES = {"user_message": "user", "assistant_message": "assistant", "system_message": "system"}
_ROLE_STYLES = {"user": "bold blue", "assistant": "bold green", "system": "bold magenta"}
_TASK_STYLES = {"completed": "green", "failed": "red", "cancelled": "dim", "running": "cyan"}
# How `show` labels the events that are not messages or tool calls (custom ones: "event").
_LABELS = {
    "session_created": ("session", "magenta"),
    "session_updated": ("session", "magenta"),
    "session_forked": ("session", "magenta"),
    "context_compacted": ("compacted", "magenta"),
    **dict.fromkeys(TASK_TYPES, ("task", "cyan")),
}


# -- sessions ---------------------------------------------------------------------------------


@app.command("sessions")
def list_sessions(
    status: Annotated[
        Literal["active", "archived", "deleted", "all"] | None,
        typer.Option(help="Which sessions (default: active and archived)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many.")] = 50,
    search: Annotated[
        str | None, typer.Option(help="Only sessions whose title or id contains this (any case).")
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
        found = _matching_sessions(journal, status, limit, search)
    if as_json:
        print_json([session.to_dict() for session in found])
    elif found:
        console.print(_sessions_table(found))
    else:
        typer.echo("no sessions matched", err=True)
    if not found:
        raise typer.Exit(EXIT_PROBLEMS)


def _matching_sessions(
    journal: Journal, status: str | None, limit: int, search: str | None
) -> list[Session]:
    needle = search.casefold() if search else None
    found: list[Session] = []
    cursor: str | None = None
    while len(found) < limit:
        size = min(MAX_PAGE, 1000 if needle else limit - len(found))
        page = journal.sessions(status=status, limit=size, cursor=cursor)
        found += [
            s
            for s in page
            if needle is None or needle in s.title.casefold() or needle in s.session_id.casefold()
        ]
        if len(page) < size:
            break
        cursor = page[-1].last_position
    return found[:limit]


def _sessions_table(found: list[Session]) -> Table:
    # Only the title gives way on a narrow terminal: ids and times stay whole.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, expand=True)
    table.add_column("Session", no_wrap=True, min_width=max(len(s.session_id) for s in found))
    table.add_column("Title", no_wrap=True, overflow="ellipsis", ratio=1)
    table.add_column("Status", no_wrap=True, min_width=8)
    table.add_column("Events", justify="right", no_wrap=True, min_width=6)
    table.add_column("Last activity", no_wrap=True, min_width=19)
    table.add_column("Turn", no_wrap=True, min_width=4)
    for s in found:
        table.add_row(
            s.session_id,
            Text(s.title),
            s.status,
            str(s.event_count),
            local_time(s.updated_at),
            "open" if s.turn_open else "",
        )
    return table


# -- show -------------------------------------------------------------------------------------


@app.command()
def show(
    session_id: SessionArgument,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Show a session as a chat: messages, tool calls under their turn, then its tasks.

    --json prints {session, events, tool_calls, tasks}.

    Example: agentjournal show sess_abc123 --db agent.db
    """
    with opened(db, tenant) as journal:
        session = journal.get_session(session_id)
        events = list(_all_events(journal, session_id, 0))
        calls = journal.tool_calls(session_id)
        tasks = _all_tasks(journal, session_id)
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
    messages = sum(1 for e in events if e.type in _ROLES and "supersedes" not in e.payload)
    console.print(_header(session, messages, len(calls), len(tasks)))
    console.print()
    console.print(_timeline(events, {call.call_id: call for call in calls}))
    if tasks:
        console.print()
        console.print(Text("Tasks", style="bold"))
        console.print(_tasks_table(tasks))


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


def _header(session: Session, messages: int, calls: int, tasks: int) -> Text:
    header = Text.assemble(
        (session.title or "(untitled)", "bold"), "  ", (session.session_id, "dim")
    )
    facts = [session.status, f"model {session.model}" if session.model else "no model"]
    facts += [_count(session.event_count, "event"), _count(messages, "message")]
    facts += [_count(calls, "tool call"), _count(tasks, "task")]
    facts += [f"tokens {session.prompt_tokens} in / {session.completion_tokens} out"]
    header.append("\n" + " · ".join(facts))
    times = [f"created {local_time(session.created_at)}"]
    times += [f"last activity {local_time(session.updated_at)}"]
    if session.forked_from:
        times.append(f"forked from {session.forked_from} at #{session.forked_at_seq}")
    if session.turn_open:
        times.append("turn open")
    header.append("\n" + " · ".join(times), style="dim")
    if session.system_prompt:
        header.append("\nsystem prompt: ", style="bold magenta")
        header.append(session.system_prompt)
    return header


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def _timeline(events: list[Event], calls: dict[str, ToolCall]) -> Table:
    """One row per event; a model response's tool calls sit under it with their results (which
    the journal may hold far below), so the tool_result events themselves need no row."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True, style="dim")
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    previous = ""  # as replay folds it: a tool call after text or a call joins that response
    for event in events:
        kind, payload, seq = event.type, event.payload, f"#{event.seq}"
        if kind in _ROLES:
            role = _ROLES[kind]
            body = Text(payload["content"])
            if "supersedes" in payload:
                body = Text(f"(corrects #{payload['supersedes']}) ", style="italic") + body
            grid.add_row(seq, Text(role, style=_ROLE_STYLES[role]), body)
            is_text = kind == "assistant_message" and "supersedes" not in payload
            previous = "text" if is_text else kind
        elif kind == "tool_call":
            if previous not in ("text", "tool_call"):
                grid.add_row("", Text("assistant", style=_ROLE_STYLES["assistant"]), "")
            grid.add_row(seq, Text("  ↳ tool", style="cyan"), _call_body(event, calls))
            previous = kind
        elif kind == "tool_result":
            if payload["call_id"] not in calls:  # no call to show it under
                grid.add_row(seq, Text("  ↳ result", style="cyan"), Text(describe(event)))
            previous = kind
        else:
            label, style = _LABELS.get(kind, ("event", "yellow"))
            body = Text(describe(event))
            if kind not in _LABELS:  # a custom event: its type, then its payload
                body = Text(f"{kind} ", style="yellow") + body
            grid.add_row(seq, Text(label, style=style), body)
    return grid


def _call_body(event: Event, calls: dict[str, ToolCall]) -> Text:
    payload = event.payload
    body = Text.assemble((payload["name"], "bold"), " ", payload["arguments"])
    body.append(f"  [{payload['call_id']}]", style="dim")
    call = calls.get(payload["call_id"])
    if call is None or call.result is None:
        body.append("\n→ pending (no result yet)", style="dim italic")
        return body
    style = "red" if call.status == "error" else "green"
    body.append(f"\n→ {call.status} #{call.result_seq}: ", style=style)
    body.append(call.result)
    return body


def _tasks_table(tasks: list[Task]) -> Table:
    """Two lines a task: its bar, then what it is and how it went."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for task in tasks:
        percent = 100.0 if task.status == "completed" else task.progress * 100
        note = task.error if task.status == "failed" else task.message
        about = Text.assemble(
            (task.type, "bold"),
            " ",
            (task.status, _TASK_STYLES.get(task.status, "")),
            f" · attempt {task.attempt} · retries {task.retry_count}/{task.max_retries}\n",
            (task.task_id, "dim"),
        )
        if note:
            about.append(f" · {note}")
        grid.add_row(ProgressBar(total=100, completed=percent, width=20), f"{percent:.0f}%", about)
    return grid


def describe(event: Event) -> str:
    """An event as one short phrase (what `tail` prints after the type)."""
    kind, p = event.type, event.payload
    if kind in _ROLES:
        corrects = f"(corrects #{p['supersedes']}) " if "supersedes" in p else ""
        return f"{corrects}{p['content']}"
    if kind == "tool_call":
        return f"{p['name']} {p['arguments']} [{p['call_id']}]"
    if kind == "tool_result":
        return f"[{p['call_id']}] {'error: ' if p.get('is_error') else ''}{p['content']}"
    if kind == "context_compacted":
        return f"up to #{p['until_seq']}: {p['summary']}"
    if kind == "session_created":
        model = f" (model {p['model']})" if p.get("model") else ""
        return f"created {json.dumps(p['title'], ensure_ascii=False)}{model}"
    if kind == "session_updated":
        return "updated " + ", ".join(f"{k} = {_compact(v)}" for k, v in sorted(p.items()))
    if kind == "session_forked":
        return f"forked from {p['from_session_id']} at #{p['at_seq']}"
    if kind in TASK_TYPES:
        return f"{p['task_id']} {_task_phrase(kind, p)}"
    return _compact(p)


def _task_phrase(kind: str, p: dict[str, Any]) -> str:
    if kind == "task_created":
        return f"created ({p['type']}): {_compact(p['input'])}"
    if kind == "task_started":
        return f"started by {p['worker']} (attempt {p['attempt']})"
    if kind == "task_progress":
        note = f": {p['message']}" if p.get("message") else ""
        return f"progress {p['progress'] * 100:.0f}% (attempt {p['attempt']}){note}"
    if kind == "task_completed":
        return f"completed (attempt {p['attempt']}): {_compact(p['output'])}"
    if kind == "task_failed":
        again = ", will retry" if p["retry"] else ""
        return f"failed (attempt {p['attempt']}{again}): {p['error']}"
    return "cancelled" + (f": {p['reason']}" if p.get("reason") else "")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# -- replay -----------------------------------------------------------------------------------


@app.command()
def replay(
    session_id: SessionArgument,
    until: Annotated[
        int | None, typer.Option(min=1, help="As of this seq (time travel).", show_default=False)
    ] = None,
    format: Annotated[
        Literal["openai", "anthropic"], typer.Option(help="The message shape.")
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
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    if isinstance(replayed, dict):  # anthropic: {system, messages}
        if replayed["system"]:
            grid.add_row(Text("system", style=_ROLE_STYLES["system"]), Text(replayed["system"]))
        messages = replayed["messages"]
    else:
        messages = replayed
    for message in messages:
        role = message["role"]
        grid.add_row(Text(role, style=_ROLE_STYLES.get(role, "cyan")), _replayed_body(message))
    console.print(grid)


def _replayed_body(message: dict[str, Any]) -> Text:
    body = Text()
    content = message.get("content")
    if message["role"] == "tool":
        body.append(f"[{message['tool_call_id']}] ", style="dim")
    if isinstance(content, str):
        body.append(content)
    for block in content if isinstance(content, list) else ():
        if body:
            body.append("\n")
        if block["type"] == "text":
            body.append(block["text"])
        elif block["type"] == "tool_use":
            body.append(f"→ {block['name']} {_compact(block['input'])}", style="cyan")
            body.append(f"  [{block['id']}]", style="dim")
        else:  # tool_result
            body.append(f"[{block['tool_use_id']}] ", style="dim")
            if block.get("is_error"):
                body.append("error: ", style="red")
            body.append(str(block["content"]))
    for call in message.get("tool_calls") or ():
        if body:
            body.append("\n")
        function = call["function"]
        body.append(f"→ {function['name']} {function['arguments']}", style="cyan")
        body.append(f"  [{call['id']}]", style="dim")
    return body


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
        bool, typer.Option("--all", help="Every session of the tenant, in commit order.")
    ] = False,
    after: Annotated[
        str | None,
        typer.Option(
            help="Start after this seq (a session) or position (--all); default: the beginning.",
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

    Example: agentjournal tail sess_abc123 --after 40 --db agent.db
    """
    if (session_id is None) == (not all_sessions):
        fail("give a session id or --all (not both)")
    seq = 0
    if session_id is not None:
        try:
            seq = int(after or 0)
        except ValueError:
            fail(f"--after must be a seq (a whole number) when tailing a session, not {after!r}")
    try:
        with _stop_on_signals(), opened(db, tenant) as journal:
            events: Iterator[Event]
            if session_id is None:
                events = journal.subscribe_all(after=after) if follow else _feed(journal, after)
            elif follow:
                events = journal.subscribe(session_id, after=seq)
            else:
                events = _all_events(journal, session_id, seq)
            for event in events:
                if as_json:
                    print_json(event.to_dict())
                else:
                    _print_line(_tail_line(event, all_sessions))
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


def _feed(journal: Journal, after: str | None) -> Iterator[Event]:
    while True:
        page = journal.events_all(after=after, limit=MAX_PAGE)
        yield from page
        if len(page) < MAX_PAGE:
            return
        after = page[-1].position


def _tail_line(event: Event, with_session: bool) -> Text:
    line = Text()
    if with_session:
        line.append(f"@{event.position} {event.session_id} ", style="dim")
    line.append(f"#{event.seq} ", style="bold")
    line.append(f"{local_time(event.created_at)} ", style="dim")
    line.append(f"{event.type} ", style="cyan")
    line.append(describe(event).replace("\r", "\\r").replace("\n", "\\n"))
    return line


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
        console.print(_tail_line(event, with_session=False), soft_wrap=True)


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

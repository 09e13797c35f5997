"""What every command shares: the `--db`, `--tenant`, `--json` and `--progress` options, opening
the journal, progress on stderr, and exit codes a script can trust (0 done, 1 problems found or
nothing matched, 2 could not run).

An error is one line on stderr, `error: ...`, saying what to change (`say`, `fail`); `app` turns
what a command raises into such a line.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, Final, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from typer._click.core import Context, ParameterSource  # Typer's own Click (since 0.29)
from typer._click.globals import get_current_context

from agentjournal.errors import JournalError
from agentjournal.journal import Journal

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "DbOption",
    "JsonOption",
    "ProgressOption",
    "TenantOption",
    "console",
    "errors",
    "fail",
    "local_time",
    "opened",
    "print_json",
    "progress",
    "require_extra",
    "say",
    "wants_progress",
]

EXIT_OK: Final = 0
EXIT_PROBLEMS: Final = 1  # the command ran and found something wrong (verify) or nothing to act on
EXIT_FAILED: Final = 2  # the command could not run: bad input, missing session, database error

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="AGENTJOURNAL_DB",
        help="SQLite file or postgresql:// URL (env AGENTJOURNAL_DB).",
    ),
]
TenantOption = Annotated[
    str, typer.Option("--tenant", help="The tenant to act as (every verb is scoped to it).")
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON (one document, or one per line) for scripts.")
]
ProgressOption = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Show progress on stderr (default: when stderr is a terminal, without --json).",
        show_default=False,
    ),
]

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


def say(message: str) -> None:
    """`error: message`, one line on stderr (never wrapped, whatever the terminal's width)."""
    # Messages quote user input and pip lines ('agentjournal[server]'): not markup.
    one_line = " ".join(message.split())
    errors.print(f"[bold red]error:[/] {escape(one_line)}", markup=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """End the command: `message` on stderr, then exit `code` (2: could not run)."""
    say(message)
    raise typer.Exit(code)


# What each extra of pyproject.toml installs, by import name: a command that finds one of these
# missing names the extra to install; any other ImportError is a bug and keeps its traceback.
EXTRA_MODULES: Final = {
    "server": frozenset(
        {
            "fastapi",
            "starlette",
            "pydantic",
            "uvicorn",
            "httptools",
            "uvloop",
            "sse_starlette",
            "prometheus_client",
            "httpx",
            "httpx_sse",
        }
    ),
    "openai": frozenset({"openai"}),
    "otel": frozenset({"opentelemetry", "google"}),  # google: protobuf, under the OTLP exporter
}


def require_extra(extra: str, command: str, *modules: str) -> None:
    """Import `modules` now, before the command starts work: if one is missing because `extra`
    is not installed, end with the pip line that installs it (exit 2) instead of a traceback."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = (exc.name or "").partition(".")[0]
            if missing not in EXTRA_MODULES[extra]:
                raise
            fail(
                f"`agentjournal {command}` needs the {extra} extra ({missing} is not installed):"
                f" pip install 'agentjournal[{extra}]'"
            )


@contextmanager
def opened(db: str, tenant: str = "default", *, create: bool = False) -> Iterator[Journal]:
    """The journal at `db`, closed when the block ends (its errors are `app`'s to show).

    Opening a SQLite path creates the file, so commands that only read refuse a path that does
    not exist: a typo must not leave an empty database behind and report "no sessions".
    """
    try:
        journal = Journal.open(db, tenant=tenant, create=create)
    except JournalError as exc:  # a missing file among them: says which, and how to name another
        fail(f"{exc}{_db_hint()}")
    try:
        yield journal
    finally:
        journal.close()


def wants_progress(asked: bool | None, as_json: bool) -> bool:
    """`--progress` or `--no-progress` if given; otherwise only for a person at a terminal, and
    not beside `--json`, which a script reads."""
    if asked is not None:
        return asked
    return not as_json and errors.is_terminal


def progress(show: bool, *count: ProgressColumn) -> Progress:
    """A progress display on stderr (nothing at all unless `show`): a spinner, each task's
    description, a bar, the `count` columns and the time elapsed. Use it as `with`."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        *count,
        TimeElapsedColumn(),
        console=errors,
        disable=not show,
        # Only the display goes to stderr: what a command prints meanwhile keeps its stream.
        redirect_stdout=False,
        redirect_stderr=False,
    )


def _db_hint() -> str:
    """ " (pass --db or set AGENTJOURNAL_DB)" if the running command's `--db` is its default,
    the user having given neither; "" once they named a database (the hint would not help)."""
    ctx = get_current_context(silent=True)
    if ctx is None or "db" not in ctx.params:
        return ""
    if ctx.get_parameter_source("db") is not ParameterSource.DEFAULT:
        return ""
    env = " or set AGENTJOURNAL_DB" if _takes_env(ctx) else ""
    return f" (pass --db{env})"


def _takes_env(ctx: Context) -> bool:
    return any(p.name == "db" and p.envvar for p in ctx.command.params)


def print_json(value: Any) -> None:
    """One JSON document on one line (also for streams: one line per item)."""
    console.file.write(json.dumps(value, ensure_ascii=False) + "\n")
    console.file.flush()


def local_time(ms: int) -> str:
    """A journal timestamp (ms since the epoch) as this machine's local time, to the second."""
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")

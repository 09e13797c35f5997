"""The `agentjournal` Typer application; the command modules register themselves on it.

It is also the one place where a mistake becomes a message: whatever a command raises that a
user can fix — a usage error, any `JournalError`, a file that cannot be read or written — ends
as one line on stderr and exit 2. Anything else is a bug and keeps its traceback (exit 1).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer._click import exceptions as click  # Typer's own copy of Click (since 0.29)
from typer.core import TyperGroup

from agentjournal.cli.common import EXIT_FAILED, say
from agentjournal.errors import JournalError

__all__ = ["app", "keys_app"]


class _OneLineErrors(TyperGroup):
    """Runs the command line with Click's standalone handling off, so that errors reach this
    `main` instead of Typer's boxed usage text or Click's traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        def run() -> Any:
            return super(_OneLineErrors, self).main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )

        if not standalone_mode:  # an embedding program handles what is raised
            return run()
        try:
            code = run()  # the command's return value (None), or the code of a typer.Exit
        except click.NoArgsIsHelpError as exc:
            code = exc.exit_code  # the help is already printed
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            code = _fail(exc.format_message().rstrip(".") + where)
        except typer.Abort:
            say("aborted")
            code = 1
        except click.ClickException as exc:
            code = _fail(exc.format_message())
        except JournalError as exc:
            code = _fail(str(exc))
        except OSError as exc:
            if exc.filename is None:  # not about a path the user gave: a bug, or worse
                raise
            code = _fail(f"{exc.strerror or exc}: {str(exc.filename)!r}")
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> int:
    say(message)
    return EXIT_FAILED


app = typer.Typer(
    name="agentjournal",
    cls=_OneLineErrors,
    help=(
        "Durable memory for AI agents: an append-only event journal on SQLite or PostgreSQL."
        " Exit codes: 0 done, 1 the check found problems (verify) or nothing matched,"
        " 2 could not run (bad input, missing session, unreachable database)."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    # A bug's traceback without each frame's variables: they may hold a database password.
    pretty_exceptions_show_locals=False,
)

keys_app = typer.Typer(
    help="API keys for the HTTP service (one tenant each).", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

"""The `agentjournal` Typer application; the command modules register themselves on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="agentjournal",
    help=(
        "Durable memory for AI agents: an append-only event journal on SQLite or PostgreSQL."
        " Exit codes: 0 done, 1 the check found problems (verify) or nothing matched,"
        " 2 could not run (bad input, missing session, unreachable database)."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

keys_app = typer.Typer(
    help="API keys for the HTTP service (one tenant each).", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

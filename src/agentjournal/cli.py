"""The `agentjournal` command: a thin mirror of the library (more commands arrive with the
operations issue)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="agentjournal",
    help="Durable memory for AI agents: an append-only event journal on SQLite.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Durable memory for AI agents: an append-only event journal on SQLite."""


@app.command()
def demo(
    db: Annotated[
        str | None, typer.Option(help="Database file to create (default: a temporary one).")
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the database file afterwards.")] = False,
) -> None:
    """Journal the seed's order conversation, SIGKILL the writer mid-write, reopen and replay.

    Example: agentjournal demo --db /tmp/demo.db --keep
    """
    from agentjournal.demo import main as run_demo

    raise typer.Exit(run_demo(db, keep=keep))


def main() -> None:
    app()


if __name__ == "__main__":
    main()

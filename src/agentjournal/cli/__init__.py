"""The `agentjournal` command: one module per group of commands, all thin over the library.

`service` (demo, serve, keys), `sessions` (sessions, show, replay, tail, compact, purge),
`write` (create, append), `data` (migrate, verify, backup, restore, export, import), `search`,
`otel` (otel-export), `replicate` (replicate, replication-status) and `bench`; `common` holds
the options and the exit codes they share, `render` how sessions, events and tasks are printed.
"""

from __future__ import annotations

from agentjournal.cli import (  # noqa: F401  (they register commands)
    bench,
    data,
    mcp_server,
    otel,
    replicate,
    search,
    service,
    sessions,
    write,
)
from agentjournal.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    app()

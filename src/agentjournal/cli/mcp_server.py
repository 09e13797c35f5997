"""`mcp`: the journal as an MCP server over stdio, for an MCP client's config file (and what
`serve --mcp` mounts at /mcp)."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Annotated, Literal

import typer

from agentjournal.cli.app import app
from agentjournal.cli.common import DbOption, TenantOption, fail, opened

__all__ = ["mcp", "mcp_mode"]

_NEEDS = "needs the mcp extra: pip install 'agentjournal[mcp]'"


@app.command()
def mcp(
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    allow_writes: Annotated[
        bool,
        typer.Option(
            help="Also offer the writing tools (create_session, append_message, append_note)."
            " Nothing deletes, with or without it."
        ),
    ] = False,
) -> None:
    """Serve the journal to an MCP client over stdio: search, read and replay past sessions.

    Put the command in the client's config; it speaks MCP on stdin and stdout (see docs/mcp.md).

    Example: agentjournal mcp --db agent.db --tenant acme
    """
    if importlib.util.find_spec("mcp") is None:
        fail(f"`agentjournal mcp` {_NEEDS}")
    from agentjournal.aio import AsyncJournal
    from agentjournal.mcp.transports import serve_stdio

    # Read-only, a mistyped path must not leave an empty database behind.
    with opened(db, tenant, create=allow_writes) as journal:
        asyncio.run(serve_stdio(AsyncJournal(journal), allow_writes=allow_writes))


def mcp_mode(mode: str) -> Literal["read", "write"] | None:
    """`serve --mcp`: what `create_app(mcp=)` gets. 'read' quietly means off without the extra."""
    installed = importlib.util.find_spec("mcp") is not None
    if mode == "off" or (mode == "read" and not installed):
        return None
    if mode not in ("read", "write"):
        raise typer.BadParameter(f"{mode!r}: read, write or off", param_hint="--mcp")
    if not installed:
        fail(f"`serve --mcp write` {_NEEDS}")
    return "read" if mode == "read" else "write"

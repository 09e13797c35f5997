"""`agentjournal.mcp`: the journal as an MCP server, so that any MCP client can recall from it.

Tools (tools.py) search, list and read sessions, their tool calls, replay and fork them (and, when
writes are allowed, create sessions and append messages and notes); resources (resources.py) are
session transcripts whose subscribers are told of new events; the `continue_session` prompt
replays a session. transports.py serves it over stdio, and as an ASGI app that `serve` mounts at
`/mcp` behind its API keys. Needs the `mcp` extra: `pip install 'agentjournal[mcp]'`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import ListenHandler

from agentjournal.aio import AsyncJournal
from agentjournal.mcp.resources import (
    PROMPTS,
    TEMPLATES,
    Updates,
    get_prompt,
    list_resources,
    read_resource,
)
from agentjournal.mcp.tools import call_tool, listed_tools

__all__ = ["JournalOf", "Recall", "build_server"]

JournalOf = Callable[[ServerRequestContext[Any, Any]], AsyncJournal]
"""The journal of the caller of a request: one tenant's (stdio), or the key's tenant's (HTTP)."""

INSTRUCTIONS = (
    "This server is a durable journal of past agent sessions (messages, tool calls, results). "
    "When a question touches earlier work, search it before answering, then read the session "
    "around the hits; never guess at what happened before your context begins."
)


class Recall:
    """What an MCP server over the journal keeps: the subscriptions of each tenant."""

    def __init__(self) -> None:
        self._updates: dict[str, tuple[Updates, ListenHandler]] = {}

    def updates(self, journal: AsyncJournal) -> tuple[Updates, ListenHandler]:
        found = self._updates.get(journal.tenant)
        if found is None:
            updates = Updates(journal)
            found = self._updates[journal.tenant] = (updates, ListenHandler(updates.bus))
        return found

    async def close(self) -> None:
        for updates, listen in self._updates.values():
            listen.close()
            await updates.close()


def build_server(journal_of: JournalOf, *, allow_writes: bool = False) -> tuple[Server, Recall]:
    """The low-level MCP server over the journal `journal_of(ctx)` names for each request, and its
    subscriptions (close them when the server stops). Writing tools only with `allow_writes`."""
    recall = Recall()
    Ctx = ServerRequestContext[Any, Any]

    async def on_list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=listed_tools(allow_writes))

    async def on_call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await call_tool(journal_of(ctx), params.name, params.arguments, allow_writes)

    async def on_list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return await list_resources(journal_of(ctx), None if params is None else params.cursor)

    async def on_list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def on_read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        return await read_resource(journal_of(ctx), params.uri)

    async def on_subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> Any:
        updates, _ = recall.updates(journal_of(ctx))
        await updates.check(params.uri)
        await updates.start()
        updates.subscribe(params.uri, _connection(ctx), ctx.session)
        return types.EmptyResult()

    async def on_unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> Any:
        updates, _ = recall.updates(journal_of(ctx))
        updates.unsubscribe(params.uri, _connection(ctx))
        return types.EmptyResult()

    async def on_listen(ctx: Ctx, params: types.SubscriptionsListenRequestParams) -> Any:
        updates, listen = recall.updates(journal_of(ctx))
        for uri in params.notifications.resource_subscriptions or ():
            await updates.check(uri)
        await updates.start()
        return await listen(ctx, params)

    async def on_list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def on_get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> Any:
        return await get_prompt(journal_of(ctx), params.name, params.arguments)

    server: Server = Server(
        "agentjournal",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_list_resource_templates=on_list_templates,
        on_read_resource=on_read_resource,
        on_subscribe_resource=on_subscribe,
        on_unsubscribe_resource=on_unsubscribe,
        on_subscriptions_listen=on_listen,
        on_list_prompts=on_list_prompts,
        on_get_prompt=on_get_prompt,
    )
    return server, recall


def _connection(ctx: ServerRequestContext[Any, Any]) -> object:
    # A handshake-era subscription lives as long as the client's connection; each request gets
    # its own ServerSession over it, so the connection is what tells subscribers apart.
    return getattr(ctx.session, "_connection", ctx.session)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentjournal")
    except PackageNotFoundError:
        return "0"

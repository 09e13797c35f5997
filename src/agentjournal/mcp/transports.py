"""The MCP server over stdio (`agentjournal mcp`, for a client's config file) and as the ASGI app
that `serve` mounts at `/mcp` (streamable HTTP), where the service has already said which tenant
the request's key belongs to."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

from agentjournal.aio import AsyncJournal
from agentjournal.mcp import build_server

__all__ = ["TENANT_SCOPE_KEY", "HttpEndpoint", "serve_stdio"]

TENANT_SCOPE_KEY = "agentjournal.tenant"
"""Where the service puts the caller's tenant in a request's ASGI scope before `/mcp` sees it."""


async def serve_stdio(journal: AsyncJournal, *, allow_writes: bool = False) -> None:
    """Serve `journal` (one tenant's) over this process' stdin and stdout until the client
    closes them."""
    server, recall = build_server(lambda ctx: journal, allow_writes=allow_writes)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await recall.close()


class HttpEndpoint:
    """The streamable HTTP endpoint: an ASGI app for requests whose scope carries the caller's
    tenant (`TENANT_SCOPE_KEY`), and the `lifespan()` it needs to run in. `loopback_only` turns
    on the SDK's DNS-rebinding guard (Host and Origin must be this machine), for an open
    service whose callers are whoever reaches loopback."""

    def __init__(
        self,
        journal_for: Callable[[str], AsyncJournal],
        *,
        allow_writes: bool = False,
        loopback_only: bool = False,
    ) -> None:
        def journal_of(ctx: ServerRequestContext[Any, Any]) -> AsyncJournal:
            request = ctx.request
            tenant = None if request is None else request.scope.get(TENANT_SCOPE_KEY)
            if not isinstance(tenant, str):
                raise MCPError(types.INVALID_REQUEST, "no tenant: the request did not pass a key")
            return journal_for(tenant)

        self.server, self._recall = build_server(journal_of, allow_writes=allow_writes)
        security = None
        if loopback_only:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        self._manager = StreamableHTTPSessionManager(self.server, security_settings=security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = scope.get(TENANT_SCOPE_KEY)
        if isinstance(tenant, str):
            # The SDK binds an MCP session to the user of the request that opened it and answers
            # 404 to any other: another tenant's key with this session's id can neither post
            # into it nor open its stream, where this tenant's subscriptions are notified.
            principal = AccessToken(token="", client_id=f"tenant:{tenant}", scopes=[])
            scope["user"] = AuthenticatedUser(principal)
        await self._manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            async with self._manager.run():
                yield
        finally:
            await self._recall.close()

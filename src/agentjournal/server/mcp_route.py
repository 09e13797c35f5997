"""`/mcp`: the MCP server (agentjournal.mcp) over streamable HTTP, behind the same keys, tenants
and rate limit as every route: the caller's key names the tenant whose journal it sees."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from agentjournal.mcp.transports import TENANT_SCOPE_KEY, HttpEndpoint
from agentjournal.server.problems import Problem, raised_problem_response
from agentjournal.server.service import Service

__all__ = ["McpRoute"]


class McpRoute:
    """ASGI app of `/mcp`: 401/403 problems exactly as the API answers them, else the MCP
    endpoint with the caller's tenant in the scope. Run `endpoint.lifespan()` around serving."""

    def __init__(self, service: Service, *, allow_writes: bool) -> None:
        self.service = service
        self.endpoint = HttpEndpoint(
            service.journal_for, allow_writes=allow_writes, loopback_only=service.open
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        try:
            tenant, key_id = self.service.caller(
                Headers(scope=scope).get("authorization"), None if client is None else client[0]
            )
            self.service.admit(key_id)
        except Problem as exc:
            await raised_problem_response(exc)(scope, receive, send)
            return
        scope[TENANT_SCOPE_KEY] = tenant
        await self.endpoint(scope, receive, send)

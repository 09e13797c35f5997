"""The HTTP API under /v1: each route parses, calls one journal verb for the caller's tenant, and
renders. Errors are problem+json (server/problems.py); bodies are guarded before routing
(server/body.py); streams are SSE (server/streams.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentjournal import inspector
from agentjournal.aio import AsyncJournal
from agentjournal.journal import MAX_INT, Journal
from agentjournal.runtime import Agent
from agentjournal.server import search_routes, task_routes, turn_routes
from agentjournal.server.agent_host import AgentHost
from agentjournal.server.body import BodyGuard
from agentjournal.server.hot import HotAppend, append_events
from agentjournal.server.models import (
    AppendBatch,
    AppendOne,
    CompactRequest,
    CreateSession,
    EventList,
    EventOut,
    EventPage,
    FeedHead,
    ForkRequest,
    Health,
    MessageList,
    MessageOut,
    Purged,
    ReplayOut,
    SessionOut,
    SessionPage,
    UpdateSession,
)
from agentjournal.server.problems import Problem, install_problem_handlers
from agentjournal.server.routing import (
    ERROR_RESPONSES,
    Format,
    IdempotencyKey,
    ReplayFormat,
    Tenant,
    created_response,
    journal_for,
    repeat_doc,
    service_of,
)
from agentjournal.server.service import Limits, Metrics, Service
from agentjournal.server.service_app import ServiceApp
from agentjournal.server.streams import feed_stream, session_stream

__all__ = ["create_app"]


def _replayed(messages: list[dict[str, Any]] | dict[str, Any], format: ReplayFormat) -> ReplayOut:
    if isinstance(messages, dict):
        return ReplayOut(format=format, system=messages["system"], messages=messages["messages"])
    return ReplayOut(format=format, system=None, messages=messages)


router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


@router.post(
    "/sessions",
    status_code=201,
    response_model=SessionOut,
    responses=repeat_doc(SessionOut),
    tags=["sessions"],
)
async def create_session(
    request: Request, body: CreateSession, tenant: Tenant, key: IdempotencyKey = None
) -> JSONResponse:
    """Create a session (201); a repeated Idempotency-Key answers 200 with the original."""
    session, created = await journal_for(request, tenant).create_session_ex(
        body.title,
        model=body.model,
        system_prompt=body.system_prompt,
        metadata=body.metadata,
        idempotency_key=key,
    )
    return created_response(SessionOut.of(session), created)


@router.get("/sessions", tags=["sessions"])
async def list_sessions(
    request: Request,
    tenant: Tenant,
    status: Literal["active", "archived", "deleted", "all"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=39, pattern=r"^[0-9]+$")] = None,
    search: Annotated[
        str | None,
        Query(
            max_length=Journal.MAX_SEARCH,
            description="Only sessions whose title or id contains this, in any case (matched "
            "as given, not trimmed; empty matches all). Pass the same search with `cursor`.",
        ),
    ] = None,
) -> SessionPage:
    """Sessions, most recent activity first; follow `next_cursor` for the next page. `search`
    keeps those whose title or id contains it, in any case."""
    sessions = await journal_for(request, tenant).sessions(
        status=status, limit=limit, cursor=cursor, search=search
    )
    next_cursor = sessions[-1].last_position if len(sessions) == limit else None
    sources = await journal_for(request, tenant).session_sources([s.session_id for s in sessions])
    return SessionPage(
        sessions=[SessionOut.of(s, sources.get(s.session_id)) for s in sessions],
        next_cursor=next_cursor,
    )


@router.get("/sessions/{session_id}", tags=["sessions"])
async def get_session(request: Request, session_id: str, tenant: Tenant) -> SessionOut:
    """The session, with `source_id` naming the journal it was replicated from, if it was."""
    journal = journal_for(request, tenant)
    session = await journal.get_session(session_id)
    sources = await journal.session_sources([session_id])
    return SessionOut.of(session, sources.get(session_id))


@router.patch("/sessions/{session_id}", tags=["sessions"])
async def update_session(
    request: Request, session_id: str, body: UpdateSession, tenant: Tenant
) -> SessionOut:
    """Change title, metadata (replaced whole) or status; deleting here is a soft delete."""
    journal = journal_for(request, tenant)
    session = await journal.update_session(
        session_id, title=body.title, metadata=body.metadata, status=body.status
    )
    sources = await journal.session_sources([session_id])
    return SessionOut.of(session, sources.get(session_id))


@router.delete("/sessions/{session_id}", response_model=SessionOut | Purged, tags=["sessions"])
async def delete_session(
    request: Request, session_id: str, tenant: Tenant, purge: bool = False
) -> SessionOut | Purged:
    """Soft delete (the session stays readable), or with ?purge=true remove it for good."""
    journal = journal_for(request, tenant)
    if purge:
        count = await journal.purge_session(session_id, actor=f"http:{tenant}")
        return Purged(session_id=session_id, events_deleted=count)
    session = await journal.delete_session(session_id)
    sources = await journal.session_sources([session_id])
    return SessionOut.of(session, sources.get(session_id))


@router.post(
    "/sessions/{session_id}/events",
    status_code=201,
    response_model=EventOut | EventList,
    responses=repeat_doc(EventOut | EventList),
    tags=["events"],
)
async def append(
    request: Request, session_id: str, body: AppendOne | AppendBatch, tenant: Tenant
) -> JSONResponse:
    """Append one event, or a batch atomically (201; 200 for an idempotent repeat)."""
    # Well-formed appends are answered by HotAppend before they reach here (server/hot.py);
    # this route documents the API and answers the rest the same way.
    return await append_events(service_of(request), tenant, session_id, body)


@router.get("/sessions/{session_id}/events", tags=["events"])
async def events_page(
    request: Request,
    session_id: str,
    tenant: Tenant,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    before: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    last: Annotated[int | None, Query(ge=1, le=1000)] = None,
    around: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
) -> EventPage:
    """A page of events, oldest first: forward after `after`, or the newest `last` (below
    `before`), or the newest `limit` below `before`, or `limit` around the seq `around`."""
    if last is None and limit is None:
        limit = 100
    events = await journal_for(request, tenant).events(
        session_id, after=after, before=before, last=last, around=around, limit=limit
    )
    forward = before is None and last is None and around is None
    if forward:
        next_after = events[-1].seq if len(events) == limit else None
        next_before = None
    else:
        # Reading backwards or around: the page may have older events before it, and (unless it
        # ends at the session's newest) newer ones after it; an empty page says there are none.
        next_before = events[0].seq if events and events[0].seq > after + 1 else None
        reaches_end = before is None and around is None
        next_after = events[-1].seq if events and not reaches_end else None
    return EventPage(
        events=[EventOut.of(e) for e in events], next_after=next_after, next_before=next_before
    )


@router.get(
    "/sessions/{session_id}/events/stream",
    response_class=Response,
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE, id = seq"}},
    tags=["events"],
)
async def stream_session(
    request: Request,
    session_id: str,
    tenant: Tenant,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    follow: bool = True,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=19, pattern=r"^[0-9]+$")
    ] = None,
) -> Response:
    """Every event after `after` (or after Last-Event-ID, which wins), then live ones."""
    if last_event_id is not None:
        if not (last_event_id.isascii() and last_event_id.isdigit()) or (
            int(last_event_id) > MAX_INT
        ):
            raise Problem(422, "Invalid request", "Last-Event-ID must be a seq (an integer)")
        after = int(last_event_id)
    service = service_of(request)
    session = await journal_for(request, tenant).get_session(session_id)  # 404 before streaming
    key_id = request.state.key_id
    return session_stream(service, tenant, key_id, session_id, after, follow, session.last_seq)


@router.get("/sessions/{session_id}/messages", tags=["read"])
async def messages(
    request: Request,
    session_id: str,
    tenant: Tenant,
    last: Annotated[int | None, Query(ge=1, le=1000)] = None,
) -> MessageList:
    found = await journal_for(request, tenant).messages(session_id, last=last)
    return MessageList(messages=[MessageOut.of(m) for m in found])


@router.get("/sessions/{session_id}/replay", tags=["read"])
async def replay(
    request: Request,
    session_id: str,
    tenant: Tenant,
    format: ReplayFormat = "openai",
    until: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
) -> ReplayOut:
    """The message list a model accepts, as of `until` if given: Chat Completions messages,
    Anthropic `system` + `messages`, or (`responses`) Responses API input items."""
    out = await journal_for(request, tenant).replay(session_id, until=until, format=format)
    return _replayed(out, format)


@router.get("/sessions/{session_id}/context", tags=["read"])
async def context(
    request: Request,
    session_id: str,
    tenant: Tenant,
    max_tokens: Annotated[int, Query(ge=1, le=MAX_INT)],
    format: Format = "openai",
) -> ReplayOut:
    """The longest suffix of the replay that fits `max_tokens`."""
    out = await journal_for(request, tenant).context(
        session_id, max_tokens=max_tokens, format=format
    )
    return _replayed(out, format)


@router.post(
    "/sessions/{session_id}/fork",
    status_code=201,
    response_model=SessionOut,
    responses=repeat_doc(SessionOut),
    tags=["sessions"],
)
async def fork(
    request: Request,
    session_id: str,
    body: ForkRequest,
    tenant: Tenant,
    key: IdempotencyKey = None,
) -> JSONResponse:
    session, created = await journal_for(request, tenant).fork_ex(
        session_id, body.at_seq, title=body.title, idempotency_key=key
    )
    return created_response(SessionOut.of(session), created)


@router.post(
    "/sessions/{session_id}/compact",
    status_code=201,
    response_model=EventOut,
    responses=repeat_doc(EventOut),
    tags=["events"],
)
async def compact(
    request: Request,
    session_id: str,
    body: CompactRequest,
    tenant: Tenant,
    key: IdempotencyKey = None,
) -> JSONResponse:
    event, created = await journal_for(request, tenant).compact_ex(
        session_id, body.until_seq, body.summary, idempotency_key=key
    )
    return created_response(EventOut.of(event), created)


@router.get("/events/head", tags=["events"])
async def feed_head(request: Request, tenant: Tenant) -> FeedHead:
    """The position of the tenant's newest committed event: where to start following the feed
    from now on (`GET /v1/events/stream?after=`), without reading its history first."""
    return FeedHead(position=await journal_for(request, tenant).feed_head())


@router.get(
    "/events/stream",
    response_class=Response,
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE, id = position"}},
    tags=["events"],
)
async def stream_feed(
    request: Request,
    tenant: Tenant,
    after: Annotated[str | None, Query(max_length=39, pattern=r"^[0-9]+$")] = None,
    follow: bool = True,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=39, pattern=r"^[0-9]+$")
    ] = None,
) -> Response:
    """The tenant's events after a position, in position order, then live ones."""
    if last_event_id is not None:
        after = last_event_id
    service = service_of(request)
    # Positions are the backend's own (opaque); it says whether this one is, before streaming.
    await journal_for(request, tenant).events_all(after=after, limit=1)
    return feed_stream(service, tenant, request.state.key_id, after, follow)


def create_app(
    journal: Journal,
    *,
    limits: Limits | None = None,
    require_keys: bool | None = None,
    agent: Agent | None = None,
    task_lease_seconds: float = 10.0,
    metrics_public: bool = False,
    mcp: Literal["read", "write"] | None = None,
) -> FastAPI:
    """The ASGI app over `journal`'s database. With `require_keys` None, keys are required as
    soon as one active key exists; otherwise every request is tenant 'default'. With an `agent`,
    `/turns` runs it, and start-up finishes the turns a crash cut before the first request.
    `/metrics` counts every tenant's requests, so it asks for a key like any route, unless
    `metrics_public` (for a scraper on a network the operator trusts). With `mcp`, `/mcp` serves
    the MCP server (the `mcp` extra), read-only or (`"write"`) with its writing tools."""
    keys = journal.keys
    service = Service(
        journal=AsyncJournal(journal),
        keys=keys,
        limits=limits or Limits(),
        open=not keys.any_active() if require_keys is None else not require_keys,
        agent_host=(
            None if agent is None else AgentHost(agent, journal, lease_seconds=task_lease_seconds)
        ),
    )

    mcp_route = None
    if mcp is not None:
        from agentjournal.server.mcp_route import McpRoute

        mcp_route = McpRoute(service, allow_writes=mcp == "write")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # uvicorn binds its socket only after this start-up part returns.
        host = service.agent_host
        if host is None:
            await asyncio.to_thread(journal.recover, all_tenants=True)
        else:
            await asyncio.to_thread(host.start)
        if mcp_route is None:
            yield
        else:
            async with mcp_route.endpoint.lifespan():
                yield
        if host is not None:
            await asyncio.to_thread(host.stop)
        await service.journal.close()

    app = ServiceApp(  # FastAPI, with appends answered before its per-request layers
        title="agentjournal",
        version="1",
        summary="Durable memory for AI agents: sessions, events, replay and live streams.",
        lifespan=lifespan,
    )
    app.state.service = service
    install_problem_handlers(app)
    app.include_router(router)
    app.include_router(task_routes.router)
    app.include_router(turn_routes.router)
    app.include_router(search_routes.router)
    app.include_router(inspector.router())
    if mcp_route is not None:
        # An ASGI app as the endpoint: Starlette passes it the request as it came.
        app.router.routes.append(
            Route("/mcp", mcp_route, methods=["GET", "POST", "DELETE"], include_in_schema=False)
        )

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> Health:
        """200 when the database answers; open to probes, so it says nothing else."""
        await service.journal.sessions(limit=1)
        return Health(status="ok")

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus"},
            **{code: ERROR_RESPONSES[code] for code in (401, 403, 429)},
        },
        tags=["operations"],
    )
    async def metrics(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        """Prometheus text format: the whole server's counts (all tenants), so the caller needs
        a valid key of any tenant, as for every route (not when served with --metrics-public)."""
        if not metrics_public:
            client = request.client
            service.caller(authorization, None if client is None else client.host)
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    _document_problems(app)
    app.add_middleware(HotAppend, service=service)  # inside BodyGuard: it uses the parsed body
    app.add_middleware(BodyGuard, max_bytes=service.limits.max_body_bytes)
    app.add_middleware(_CountErrors, metrics=service.metrics)
    return app


def _document_problems(app: FastAPI) -> None:
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = {
                "type": "object",
                "required": ["type", "title", "status", "detail"],
                "properties": {
                    "type": {"type": "string"},
                    "title": {"type": "string"},
                    "status": {"type": "integer"},
                    "detail": {"type": "string"},
                },
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class _CountErrors:
    """Counts 4xx/5xx responses by status, for /metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.metrics.errors.labels(status=str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting)

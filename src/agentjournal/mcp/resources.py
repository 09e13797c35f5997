"""Sessions as MCP resources (a transcript as text, `agentjournal://sessions/{id}`, and as JSON,
`agentjournal://sessions/{id}/json`), the updates of subscribed ones from the journal's live feed,
and the `continue_session` prompt."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any, Protocol

import mcp.types as types
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.shared.exceptions import MCPError

from agentjournal.aio import AsyncJournal
from agentjournal.errors import InvalidArgument, JournalError, SessionNotFound
from agentjournal.mcp.tools import session_dict

__all__ = [
    "PROMPTS",
    "TEMPLATES",
    "Updates",
    "get_prompt",
    "list_resources",
    "read_resource",
    "session_of",
]

PREFIX = "agentjournal://sessions/"
_URI = re.compile(r"agentjournal://sessions/([^/]{1,128})(/json)?")  # fullmatch: no "\n"
RESOURCE_PAGE = 50
TRANSCRIPT_MESSAGES = 500  # the newest messages a transcript resource shows
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
log = logging.getLogger("agentjournal.mcp")

TEMPLATES = [
    types.ResourceTemplate(
        name="session",
        uri_template=PREFIX + "{session_id}",
        description="A session's transcript as text: messages and tool calls in order.",
        mime_type="text/markdown",
    ),
    types.ResourceTemplate(
        name="session-json",
        uri_template=PREFIX + "{session_id}/json",
        description="A session's transcript as JSON: the session, its messages and tool calls.",
        mime_type="application/json",
    ),
]

PROMPTS = [
    types.Prompt(
        name="continue_session",
        description="Pick up a past session where it stopped: its conversation, replayed from "
        "the journal, as prompt messages.",
        arguments=[
            types.PromptArgument(name="session_id", description="The session.", required=True),
            types.PromptArgument(name="until", description="Replay as of this seq."),
        ],
    )
]


def session_of(uri: str) -> tuple[str, bool]:
    """(session id, as JSON) of one of our URIs; MCPError for any other."""
    match = _URI.fullmatch(uri)
    if match is None:
        raise MCPError(RESOURCE_NOT_FOUND, f"no resource {uri[:200]!r}: {PREFIX}<session id>")
    return match[1], match[2] is not None


def _failed(exc: JournalError) -> MCPError:
    code = RESOURCE_NOT_FOUND if isinstance(exc, SessionNotFound) else types.INVALID_PARAMS
    return MCPError(code, str(exc))


async def list_resources(journal: AsyncJournal, cursor: str | None) -> types.ListResourcesResult:
    try:
        sessions = await journal.sessions(limit=RESOURCE_PAGE, cursor=cursor)
    except JournalError as exc:
        raise _failed(exc) from exc
    resources = [
        types.Resource(
            uri=PREFIX + s.session_id,
            name=s.session_id,
            title=s.title or None,
            description=f"{s.title or 'untitled'}: {s.event_count} events, {s.status}",
            mime_type="text/markdown",
        )
        for s in sessions
    ]
    more = len(sessions) == RESOURCE_PAGE
    return types.ListResourcesResult(
        resources=resources, next_cursor=sessions[-1].last_position if more else None
    )


async def read_resource(journal: AsyncJournal, uri: str) -> types.ReadResourceResult:
    session_id, as_json = session_of(uri)
    try:
        session = await journal.get_session(session_id)
        messages = await journal.messages(session_id, last=TRANSCRIPT_MESSAGES)
        calls = await journal.tool_calls(session_id)
    except JournalError as exc:
        raise _failed(exc) from exc
    if as_json:
        document = {
            "session": session_dict(session),
            "messages": [
                {"seq": m.seq, "role": m.role, "content": m.content, "created_at": m.created_at}
                for m in messages
            ],
            "tool_calls": [call._asdict() for call in calls],
        }
        text = json.dumps(document, ensure_ascii=False)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )
    lines: list[tuple[int, str]] = [
        (m.seq, f"**{m.role}** (seq {m.seq}): {m.content}") for m in messages
    ]
    for call in calls:
        lines.append(
            (call.call_seq, f"**tool call** {call.name}({call.arguments}) (seq {call.call_seq})")
        )
        if call.result_seq is not None:
            lines.append((call.result_seq, f"**tool result** ({call.status}): {call.result}"))
    floor = messages[0].seq if len(messages) == TRANSCRIPT_MESSAGES else 0
    head = f"# {session.title or 'untitled'}\n\nsession {session_id} · {session.status} · "
    head += f"{session.last_seq} events"
    if floor:
        head += f" · the newest {TRANSCRIPT_MESSAGES} messages"
    body = "\n\n".join(text for seq, text in sorted(lines) if seq >= floor)
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(uri=uri, mime_type="text/markdown", text=f"{head}\n\n{body}")
        ]
    )


async def get_prompt(
    journal: AsyncJournal, name: str, arguments: dict[str, str] | None
) -> types.GetPromptResult:
    if name != "continue_session":
        raise MCPError(types.INVALID_PARAMS, f"no prompt named {name[:100]!r}")
    arguments = arguments or {}
    session_id = arguments.get("session_id")
    until = arguments.get("until")
    try:
        if session_id is None:
            raise InvalidArgument("continue_session needs session_id")
        if until is not None and not (until.isascii() and until.isdigit()):  # not "²", "٣"
            raise InvalidArgument(f"until must be a seq (a positive integer), got {until!r:.40}")
        replayed = await journal.replay(session_id, until=None if until is None else int(until))
    except JournalError as exc:
        raise _failed(exc) from exc
    assert isinstance(replayed, list)  # the openai format is a list of messages
    messages = [_prompt_message(message) for message in replayed]
    messages.append(_text("user", "Continue this conversation from where it stopped."))
    return types.GetPromptResult(description=f"session {session_id}, replayed", messages=messages)


def _text(role: types.Role, text: str) -> types.PromptMessage:
    return types.PromptMessage(role=role, content=types.TextContent(text=text))


def _prompt_message(message: dict[str, Any]) -> types.PromptMessage:
    """One replayed chat message as a prompt message (prompts have only user and assistant)."""
    role, content = message["role"], message.get("content") or ""
    if role == "system":
        return _text("user", f"(system instructions) {content}")
    if role == "tool":
        return _text("user", f"(result of tool call {message.get('tool_call_id')}) {content}")
    if role == "assistant":
        calls = [
            f"(called {c['function']['name']} with {c['function']['arguments']})"
            for c in message.get("tool_calls", [])
        ]
        return _text("assistant", "\n".join([content, *calls]).strip())
    return _text("user", content)


class Outbound(Protocol):
    """Where a handshake-era subscriber's `notifications/resources/updated` goes."""

    async def send_resource_updated(self, uri: str) -> None: ...


class Updates:
    """Resource subscriptions of one tenant: one follower of the tenant's live feed, which tells
    each subscriber of a session's URIs that it changed. Handshake-era clients subscribe with
    `resources/subscribe` (notified on their connection); 2026-era clients listen on `bus`."""

    def __init__(self, journal: AsyncJournal) -> None:
        self.journal = journal
        self.bus = InMemorySubscriptionBus()
        self._legacy: dict[str, dict[object, Outbound]] = {}  # uri -> connection -> outbound
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def check(self, uri: str) -> None:
        """Refuse a URI that is not one of this tenant's sessions (as a read would)."""
        session_id, _ = session_of(uri)
        try:
            await self.journal.get_session(session_id)
        except JournalError as exc:
            raise _failed(exc) from exc

    async def start(self) -> None:
        """Follow the feed from now on (once); returns when the follower has its start."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow())
        await self._ready.wait()

    def subscribe(self, uri: str, connection: object, outbound: Outbound) -> None:
        self._legacy.setdefault(uri, {})[connection] = outbound

    def unsubscribe(self, uri: str, connection: object) -> None:
        subscribers = self._legacy.get(uri, {})
        subscribers.pop(connection, None)
        if not subscribers:
            self._legacy.pop(uri, None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        try:
            head = await self.journal.feed_head()
        finally:
            self._ready.set()
        async for event in self._events(head):
            for uri in (PREFIX + event.session_id, f"{PREFIX}{event.session_id}/json"):
                await self.bus.publish(ResourceUpdated(uri=uri))
                for connection, outbound in list(self._legacy.get(uri, {}).items()):
                    try:
                        await outbound.send_resource_updated(uri)
                    except Exception:  # the client went away: forget its subscription
                        log.debug("dropping a subscriber of %s", uri, exc_info=True)
                        self.unsubscribe(uri, connection)

    async def _events(self, head: str | None) -> AsyncIterator[Any]:
        try:
            async for event in self.journal.subscribe_all(after=head):
                yield event
        except JournalError:
            log.exception("the live feed of the MCP subscriptions failed; no more updates")

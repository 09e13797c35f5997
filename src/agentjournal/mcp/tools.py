"""The MCP tools: each a JSON Schema input (a pydantic model), a structured output (a TypedDict's
schema) and one journal verb. A journal error or a refused argument is a tool error (`isError`)
whose text is the message the HTTP API puts in its problem's `detail`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

import mcp.types as types
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from agentjournal.aio import AsyncJournal
from agentjournal.errors import JournalError
from agentjournal.events import Event
from agentjournal.projection import Session, ToolCall

__all__ = ["TOOLS", "Tool", "call_tool", "listed_tools", "session_dict"]

WINDOW_DEFAULT = 20  # events a read_session shows unless asked: a few turns, not a history
WINDOW_MAX = 200
TEXT_MAX = 2000  # characters of one string in an event's payload before it is cut
NOTE_TYPE = "agent.note"  # a namespaced type: searchable like any other namespaced event

Seq = Annotated[int, Field(ge=1, le=2**63 - 1)]
SessionId = Annotated[str, Field(min_length=1, max_length=200, description="A session id.")]


class _Arguments(BaseModel):
    # Strict: "5" is not a number and an unknown argument is a mistake the model should see.
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchArgs(_Arguments):
    query: Annotated[str, Field(max_length=500, description="Words to find (all must match).")]
    session_status: Literal["active", "archived", "deleted", "all"] | None = Field(
        None, description="Sessions to look in (default: active and archived)."
    )
    since: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Only events created at or after this unix time in milliseconds."
    )
    until: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Only events created before this unix time in milliseconds."
    )
    types: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=20, description="Only these event types, e.g. ['user_message']."
    )
    limit: int = Field(10, ge=1, le=100, description="Hits per page.")
    cursor: Annotated[str, Field(max_length=40)] | None = Field(
        None, description="next_cursor of the previous page (same query and filters)."
    )


class ListSessionsArgs(_Arguments):
    search: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="Only sessions whose title or id contains this (any case)."
    )
    status: Literal["active", "archived", "deleted", "all"] | None = Field(
        None, description="Default: active and archived."
    )
    limit: int = Field(20, ge=1, le=100)
    cursor: Annotated[str, Field(max_length=39)] | None = Field(
        None, description="next_cursor of the previous page (same search and status)."
    )


class ReadSessionArgs(_Arguments):
    session_id: SessionId
    last: int | None = Field(
        None, ge=1, le=WINDOW_MAX, description="The newest N events (the default, N=20)."
    )
    before: Seq | None = Field(None, description="Events just before this seq (older ones).")
    after: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Events just after this seq (newer ones)."
    )
    around: Seq | None = Field(None, description="Events centred on this seq (a search hit).")
    limit: int | None = Field(
        None, ge=1, le=WINDOW_MAX, description="Window size with before/after/around (20)."
    )


class ToolCallsArgs(_Arguments):
    session_id: SessionId
    open_only: bool = Field(False, description="Only calls still waiting for their result.")


class ReplayArgs(_Arguments):
    session_id: SessionId
    format: Literal["openai", "anthropic", "responses"] = "openai"
    until: Seq | None = Field(None, description="Replay as of this seq (default: all).")


class ForkArgs(_Arguments):
    session_id: SessionId
    at_seq: Seq | None = Field(None, description="Copy events 1..at_seq (default: all).")
    title: Annotated[str, Field(max_length=500)] | None = None


class CreateSessionArgs(_Arguments):
    title: Annotated[str, Field(max_length=500)] = ""
    system_prompt: Annotated[str, Field(max_length=100_000)] | None = None
    metadata: dict[str, Any] | None = None


class AppendMessageArgs(_Arguments):
    session_id: SessionId
    role: Literal["user", "assistant", "system"]
    content: Annotated[str, Field(max_length=1_000_000)]


class AppendNoteArgs(_Arguments):
    session_id: SessionId
    text: Annotated[str, Field(min_length=1, max_length=100_000)]


class SessionOut(TypedDict):
    session_id: str
    title: str
    status: str
    model: str | None
    metadata: dict[str, Any]
    forked_from: str | None
    forked_at_seq: int | None
    last_seq: int
    event_count: int
    created_at: int
    updated_at: int


class HitOut(TypedDict):
    session_id: str
    session_title: str
    seq: int
    type: str
    created_at: int
    snippet: str
    score: float


class SearchOut(TypedDict):
    hits: list[HitOut]
    next_cursor: str | None


class SessionsOut(TypedDict):
    sessions: list[SessionOut]
    next_cursor: str | None


class EventOut(TypedDict):
    seq: int
    type: str
    created_at: int
    payload: dict[str, Any]
    cut: bool


class WindowOut(TypedDict):
    session: SessionOut
    events: list[EventOut]
    total: int
    truncated: bool
    older_before: int | None
    newer_after: int | None


class ToolCallOut(TypedDict):
    call_id: str
    name: str
    arguments: str
    status: str
    result: str | None
    call_seq: int
    result_seq: int | None


class ToolCallsOut(TypedDict):
    session_id: str
    calls: list[ToolCallOut]


class ReplayOut(TypedDict):
    format: str
    system: str | None
    messages: list[dict[str, Any]]


class AppendedOut(TypedDict):
    session_id: str
    seq: int
    type: str


Run = Callable[[AsyncJournal, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[_Arguments]
    output: Any  # the TypedDict the result is
    run: Run
    writes: bool = False
    read_only: bool = True

    def to_mcp(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=self.arguments.model_json_schema(),
            output_schema=TypeAdapter(self.output).json_schema(),
            annotations=types.ToolAnnotations(
                read_only_hint=self.read_only, destructive_hint=False, idempotent_hint=False
            ),
        )


def session_dict(session: Session) -> SessionOut:
    return {
        "session_id": session.session_id,
        "title": session.title,
        "status": session.status,
        "model": session.model,
        "metadata": session.metadata,
        "forked_from": session.forked_from,
        "forked_at_seq": session.forked_at_seq,
        "last_seq": session.last_seq,
        "event_count": session.event_count,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def _cut(value: Any) -> tuple[Any, bool]:
    """`value` with every string over TEXT_MAX characters shortened; whether any was."""
    if isinstance(value, str) and len(value) > TEXT_MAX:
        return f"{value[:TEXT_MAX]}… [{len(value) - TEXT_MAX} more characters]", True
    if isinstance(value, dict):
        pairs = {key: _cut(item) for key, item in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(c for _, c in pairs.values())
    if isinstance(value, list):
        items = [_cut(item) for item in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _event(event: Event) -> EventOut:
    payload, cut = _cut(event.payload)
    return {
        "seq": event.seq,
        "type": event.type,
        "created_at": event.created_at,
        "payload": payload,
        "cut": cut,
    }


def _call(call: ToolCall) -> ToolCallOut:
    return {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": call.status,
        "result": call.result,
        "call_seq": call.call_seq,
        "result_seq": call.result_seq,
    }


async def _search(journal: AsyncJournal, args: SearchArgs) -> SearchOut:
    page = await journal.search(
        args.query,
        session_status=args.session_status,
        since=args.since,
        until=args.until,
        types=args.types,
        limit=args.limit,
        cursor=args.cursor,
    )
    hits: list[HitOut] = [
        {
            "session_id": hit.session_id,
            "session_title": hit.session_title,
            "seq": hit.seq,
            "type": hit.type,
            "created_at": hit.created_at,
            "snippet": hit.snippet,
            "score": hit.score,
        }
        for hit in page.hits
    ]
    return {"hits": hits, "next_cursor": page.next_cursor}


async def _list_sessions(journal: AsyncJournal, args: ListSessionsArgs) -> SessionsOut:
    sessions = await journal.sessions(
        status=args.status, limit=args.limit, cursor=args.cursor, search=args.search
    )
    more = len(sessions) == args.limit
    return {
        "sessions": [session_dict(s) for s in sessions],
        "next_cursor": sessions[-1].last_position if more else None,
    }


async def _read_session(journal: AsyncJournal, args: ReadSessionArgs) -> WindowOut:
    cursors = [args.before, args.after, args.around]
    if args.last is not None and any(c is not None for c in cursors):
        raise _Refused("give last, or before/after/around with limit, not both")
    if args.limit is not None and all(c is None for c in cursors):
        raise _Refused("limit sizes a before/after/around window; use last for the newest")
    size = args.limit or WINDOW_DEFAULT
    if args.around is not None:
        events = await journal.events(args.session_id, around=args.around, limit=size)
    elif args.before is not None or args.after is not None:
        events = await journal.events(
            args.session_id, after=args.after or 0, before=args.before, limit=size
        )
    else:
        events = await journal.events(args.session_id, last=args.last or WINDOW_DEFAULT)
    session = await journal.get_session(args.session_id)
    first = events[0].seq if events else None
    last = events[-1].seq if events else None
    older = first is not None and first > 1
    newer = last is not None and last < session.last_seq
    return {
        "session": session_dict(session),
        "events": [_event(e) for e in events],
        "total": session.last_seq,
        "truncated": older or newer or not events,
        "older_before": first if older else None,
        "newer_after": last if newer else None,
    }


async def _tool_calls(journal: AsyncJournal, args: ToolCallsArgs) -> ToolCallsOut:
    calls = await journal.tool_calls(args.session_id, open_only=args.open_only)
    return {"session_id": args.session_id, "calls": [_call(c) for c in calls]}


async def _replay(journal: AsyncJournal, args: ReplayArgs) -> ReplayOut:
    replayed = await journal.replay(args.session_id, until=args.until, format=args.format)
    if isinstance(replayed, dict):
        return {
            "format": args.format,
            "system": replayed["system"],
            "messages": replayed["messages"],
        }
    return {"format": args.format, "system": None, "messages": replayed}


async def _fork(journal: AsyncJournal, args: ForkArgs) -> SessionOut:
    return session_dict(await journal.fork(args.session_id, args.at_seq, title=args.title))


async def _create_session(journal: AsyncJournal, args: CreateSessionArgs) -> SessionOut:
    session = await journal.create_session(
        args.title, system_prompt=args.system_prompt, metadata=args.metadata
    )
    return session_dict(session)


async def _append_message(journal: AsyncJournal, args: AppendMessageArgs) -> AppendedOut:
    event = await journal.append(args.session_id, f"{args.role}_message", {"content": args.content})
    return {"session_id": event.session_id, "seq": event.seq, "type": event.type}


async def _append_note(journal: AsyncJournal, args: AppendNoteArgs) -> AppendedOut:
    event = await journal.append(args.session_id, NOTE_TYPE, {"text": args.text})
    return {"session_id": event.session_id, "seq": event.seq, "type": event.type}


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in [
        Tool(
            "search",
            "Search your past sessions (conversations, tool calls and their results, notes) for "
            "words. Use it before answering anything about earlier work, decisions, people, "
            "orders or errors you may have seen before, instead of guessing: your memory ends at "
            "your context window, the journal does not. Every word must match; a trailing * "
            "matches a prefix. Returns hits (session_id, seq, snippet) best first; open one with "
            "read_session(session_id, around=seq).",
            SearchArgs,
            SearchOut,
            _search,
        ),
        Tool(
            "list_sessions",
            "List past sessions, most recent activity first, optionally only those whose title "
            "or id contains some text. Use it to find a conversation by name or to see what was "
            "worked on lately. Page with next_cursor.",
            ListSessionsArgs,
            SessionsOut,
            _list_sessions,
        ),
        Tool(
            "read_session",
            "Read a window of one session's events (messages, tool calls, results), oldest first: "
            "the newest 20 by default, or `last` N, or a `limit`-sized window before, after or "
            "around a seq (e.g. a search hit's). `total` is the session's event count and "
            "`truncated` says the window is not the whole session; page with older_before / "
            "newer_after. Long texts are cut (an event's `cut` is true).",
            ReadSessionArgs,
            WindowOut,
            _read_session,
        ),
        Tool(
            "tool_calls",
            "The tool calls made in a session, each with its arguments, status (pending, ok, "
            "error) and result: what was actually done, e.g. to check whether an action already "
            "ran before doing it again.",
            ToolCallsArgs,
            ToolCallsOut,
            _tool_calls,
        ),
        Tool(
            "replay",
            "A session as the message list a model accepts (openai chat messages, anthropic "
            "{system, messages}, or responses input items), as of a seq if given: to continue "
            "or re-run a conversation elsewhere.",
            ReplayArgs,
            ReplayOut,
            _replay,
        ),
        Tool(
            "fork",
            "Start a new session as a copy of another up to a seq (default: all of it), to try a "
            "different path from that point without touching the original. Returns the new "
            "session.",
            ForkArgs,
            SessionOut,
            _fork,
            read_only=False,
        ),
        Tool(
            "create_session",
            "Create a new, empty session to record into. Only offered when the server allows "
            "writes.",
            CreateSessionArgs,
            SessionOut,
            _create_session,
            writes=True,
            read_only=False,
        ),
        Tool(
            "append_message",
            "Record a user, assistant or system message at the end of a session.",
            AppendMessageArgs,
            AppendedOut,
            _append_message,
            writes=True,
            read_only=False,
        ),
        Tool(
            "append_note",
            "Record a note to remember (a decision, a fact, a lesson) in a session; later "
            "searches find it.",
            AppendNoteArgs,
            AppendedOut,
            _append_note,
            writes=True,
            read_only=False,
        ),
    ]
}


class _Refused(Exception):
    """An argument combination a tool refuses (its message is the tool error's text)."""


@cache
def listed_tools(allow_writes: bool) -> list[types.Tool]:
    return [tool.to_mcp() for tool in TOOLS.values() if allow_writes or not tool.writes]


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _invalid(exc: ValidationError) -> str:
    """Like the HTTP API's 422 detail: `field: message` for each problem."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )


async def call_tool(
    journal: AsyncJournal, name: str, arguments: dict[str, Any] | None, allow_writes: bool
) -> types.CallToolResult:
    """Run tool `name`; every failure the caller can cause is a tool error, never a crash."""
    tool = TOOLS.get(name)
    if tool is None:
        return _error(f"no tool named {name[:100]!r}; tools/list names them")
    if tool.writes and not allow_writes:
        return _error(f"{name} writes to the journal, and this server was started read-only")
    try:
        args = tool.arguments.model_validate(arguments or {})
        result = await tool.run(journal, args)
    except ValidationError as exc:
        return _error(_invalid(exc))
    except (JournalError, _Refused) as exc:
        return _error(str(exc))
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
    )

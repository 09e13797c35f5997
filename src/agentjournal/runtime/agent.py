"""The durable agent loop: every step is journaled before it acts, and a cut turn can be finished.

`Agent.run_turn` appends the user's message, asks the model with `context()`, appends the model's
text and tool calls in one batch, runs each tool and appends its result, and returns only after
the final `assistant_message` is durable. Every append carries `expected_seq`, so a second turn
started on the same session meanwhile gets `Conflict` and runs nothing.

`Agent.finish_turn` continues a turn a crash cut. A tool call without a result is run again only
if its tool is idempotent; otherwise it gets an error result saying it was interrupted (it may or
may not have taken effect), and the model decides what to tell the user.

The tools are Python `Tool`s and, with `mcp_servers`, the tools of MCP servers (connected and
adapted in runtime/mcp_tools.py): both are journaled, run and resumed by the same rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from agentjournal.errors import Conflict, InvalidArgument, ModelError, TurnAbandoned
from agentjournal.events import Event, NewEvent
from agentjournal.journal import MAX_PAGE, Journal
from agentjournal.projection import TURN_EVENTS, Session
from agentjournal.runtime.mcp_servers import MCPServer
from agentjournal.runtime.model_loop import TurnCancelled, TurnControl, close_model, stream_reply
from agentjournal.runtime.shapes import (
    Invocation,
    ModelReply,
    RequestedCall,
    Tool,
    ToolFailed,
    TurnResult,
)
from agentjournal.runtime.turn_stream import AsyncTurnStream, TurnStream
from agentjournal.runtime.turn_stream import _Turn as _StreamedTurn

if TYPE_CHECKING:
    from agentjournal.runtime.mcp_tools import MCPTools

__all__ = [
    "ERROR_PREFIX",
    "Agent",
    "Invocation",
    "Model",
    "ModelReply",
    "RequestedCall",
    "Tool",
    "TurnResult",
]

# Tool results that are errors start with this: the OpenAI message shape has no is_error flag,
# so the text must say it (the journal's `is_error` says it too).
ERROR_PREFIX = "error: "
INTERRUPTED = (
    ERROR_PREFIX + "interrupted: the process running this tool stopped before its result was "
    "recorded, and it was not run again because it is not idempotent (it may or may not have "
    "taken effect)"
)
EventHook = Callable[[Event], None]
# Called with each TextDelta / ToolCallDelta a streaming model produces (on the model loop's
# thread, as it arrives): asking for them is what makes a turn stream.
DeltaHook = Callable[[Any], None]


class Model(Protocol):
    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        """Answer an OpenAI-shape message list; raise `ModelError` when it cannot."""


class Agent:
    """A model, its tools, and the loop that journals every step. `name` is what sessions record
    in `metadata.agent`, so that `resume_incomplete` finishes only this agent's turns.
    `mcp_servers` are MCP servers whose tools the model is offered beside `tools` (as
    `{server}__{tool}`; the `mcp` extra), started or connected on the first turn."""

    def __init__(
        self,
        model: Model,
        tools: Sequence[Tool] = (),
        *,
        name: str = "agent",
        max_steps: int = 8,
        max_context_tokens: int = 100_000,
        task_handlers: Mapping[str, Callable[[Any], Any]] | None = None,
        mcp_servers: Sequence[MCPServer] = (),
    ) -> None:
        names = [tool.name for tool in tools]
        if len(names) != len(set(names)):
            raise InvalidArgument(f"tool names must be unique, got {names}")
        if max_steps < 1 or max_context_tokens < 1:
            raise InvalidArgument("max_steps and max_context_tokens must be at least 1")
        self.model = model
        self.tools = {tool.name: tool for tool in tools}
        self.name = name
        self.max_steps = max_steps
        self.max_context_tokens = max_context_tokens
        # Background work this agent's process runs (`Worker` handlers, by task type).
        self.task_handlers = dict(task_handlers or {})
        self._mcp: MCPTools | None = None
        if mcp_servers:
            self.add_mcp_servers(mcp_servers)

    def add_mcp_servers(self, servers: Sequence[MCPServer]) -> None:
        """Offer the tools of these MCP servers too (`serve --mcp-servers` adds them to an agent
        it loaded); names unique among the agent's servers. Before its first turn, best."""
        if self._mcp is None:
            try:
                from agentjournal.runtime.mcp_tools import MCPTools
            except ImportError as exc:
                raise InvalidArgument(
                    f"MCP servers need the mcp extra ({exc.name} is not installed):"
                    " pip install 'agentjournal[mcp]'"
                ) from exc
            self._mcp = MCPTools()
        self._mcp.add(servers)

    @property
    def mcp_servers(self) -> list[MCPServer]:
        return [] if self._mcp is None else self._mcp.servers

    def offered_tools(self) -> dict[str, Tool]:
        """The tools the model is offered now, by name: the Python tools and the tools of the
        MCP servers that are up (a Python tool wins a name both have)."""
        if self._mcp is None:
            return self.tools
        return {**self._mcp.tools(), **self.tools}

    def close(self) -> None:
        """Close the model's connections (a streaming client's are on the model loop) and stop
        the MCP servers it started."""
        close_model(self.model)
        if self._mcp is not None:
            self._mcp.close()

    def create_session(
        self, journal: Journal, title: str = "", *, idempotency_key: str | None = None, **kw: Any
    ) -> Session:
        """A session bound to this agent (`metadata.agent`), so resume may finish its turns."""
        metadata = {**(kw.pop("metadata", None) or {}), "agent": self.name}
        return journal.create_session(
            title, metadata=metadata, idempotency_key=idempotency_key, **kw
        )

    def run_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_event: EventHook | None = None,
        on_delta: DeltaHook | None = None,
        control: TurnControl | None = None,
    ) -> TurnResult:
        """Journal `text` as the user's message and run the turn to its reply.

        `Conflict` if the session is not bound to this agent (`create_session`), or if its last
        turn has not ended (another turn is running, or a crash
        cut one: `finish_turn` finishes it). With an `idempotency_key` a repeat of a finished turn
        returns its reply without running anything. `on_event` gets each event as it is
        journaled; with `on_delta` (or a `control`) a model that streams is asked to, and
        `on_delta` gets its deltas as they arrive; `control.cancel()` ends the turn early
        (`TurnControl`)."""
        if not isinstance(text, str):
            raise InvalidArgument("a turn's text must be a string")
        with journal.hold_turn(session_id) as held:
            session = self._bound(journal.get_session(session_id))
            if session.turn_open or not held:
                raise Conflict(
                    f"session {session_id!r} has a turn that has not ended (one is running, or a"
                    " crash cut it and resume has not finished it yet); wait for it and retry"
                )
            message = NewEvent("user_message", {"content": text}, idempotency_key)
            turn = _Turn(journal, session_id, on_event, session.last_seq, on_delta, control)
            written, created = turn.append_many([message])
            if not created:
                return self._repeat(journal, session_id, written[0].seq)
            return self._continue(turn)

    def stream_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        *,
        idempotency_key: str | None = None,
    ) -> TurnStream:
        """`run_turn`, as an iterator of the model's `TextDelta`s and `ToolCallDelta`s and the
        journaled `Event`s in the order they happened. The same journaling as `run_turn`; the
        iterator raises the turn's error (`Conflict`, `ModelError`, ...) where it happened.
        `.cancel()` stops the model call and journals the text yielded so far as the reply,
        marked `"interrupted": true`. Leaving the iterator early does not stop the turn."""
        return TurnStream(_StreamedTurn(self, journal, session_id, text, idempotency_key))

    def astream_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        *,
        idempotency_key: str | None = None,
    ) -> AsyncTurnStream:
        """`stream_turn` as an async iterator (`async for item in agent.astream_turn(...)`)."""
        return AsyncTurnStream(_StreamedTurn(self, journal, session_id, text, idempotency_key))

    def finish_turn(
        self,
        journal: Journal,
        session_id: str,
        *,
        on_event: EventHook | None = None,
        on_delta: DeltaHook | None = None,
        control: TurnControl | None = None,
    ) -> TurnResult | None:
        """Finish the session's cut turn (None if its last turn ended). `Conflict` if the turn
        is not cut but running (here, or in another instance on PostgreSQL), or if the session
        is not bound to this agent. `on_event`, `on_delta` and `control` as in `run_turn`."""
        with journal.hold_turn(session_id) as held:
            session = self._bound(journal.get_session(session_id))
            if not session.turn_open:
                return None
            if not held:
                raise Conflict(f"the turn of session {session_id!r} is running elsewhere")
            turn = _Turn(journal, session_id, on_event, session.last_seq, on_delta, control)
            tools = self.offered_tools()
            for call in journal.tool_calls(session_id, open_only=True):
                tool = tools.get(call.name)
                if tool is None and self._mcp is not None:
                    again = self._mcp.idempotent(call.name)  # its server is down: say why
                else:
                    again = tool is not None and tool.idempotent
                if again:
                    content, is_error = self._run_tool(
                        Invocation(session_id, call.call_id, journal.tenant),
                        call.name,
                        call.arguments,
                    )
                else:
                    content, is_error = INTERRUPTED, True
                turn.append("tool_result", _result(call.call_id, content, is_error))
            return self._continue(turn)

    def _bound(self, session: Session) -> Session:
        """`session`, if it is bound to this agent (`create_session`): a turn of one agent in
        another's session would mix their tools and prompts, and resume would finish it with
        the wrong one."""
        if session.metadata.get("agent") != self.name:
            raise Conflict(
                f"session {session.session_id!r} is not bound to agent {self.name!r}; create it"
                f' with Agent.create_session, or with metadata {{"agent": "{self.name}"}}'
            )
        return session

    def _repeat(self, journal: Journal, session_id: str, user_seq: int) -> TurnResult:
        """A retried turn: what the original turn wrote, if it has its reply."""
        events = journal.events(session_id, after=user_seq - 1, limit=MAX_PAGE)
        turn = events[:1]
        for event in events[1:]:
            if event.type == "user_message" and "supersedes" not in event.payload:
                break
            turn.append(event)
        steps = [e for e in turn if e.type in TURN_EVENTS and "supersedes" not in e.payload]
        if steps[-1].type != "assistant_message":
            raise Conflict(
                f"the turn started at seq {user_seq} has not ended yet; retry when it has"
            )
        return TurnResult(session_id, steps[-1].payload["content"], turn, created=False)

    def _continue(self, turn: _Turn) -> TurnResult:
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for _ in range(self.max_steps):
            if turn.control is not None and turn.control.cancelled:
                _raise_if_abandoned(turn.control)
                return turn.finish("", usage, interrupted=True)
            messages = turn.journal.context(turn.session_id, max_tokens=self.max_context_tokens)
            assert isinstance(messages, list)
            try:
                reply = self._ask(messages, turn)
            except TurnCancelled as cancelled:
                if turn.control is not None:
                    _raise_if_abandoned(turn.control)
                # What the user saw becomes the reply, so the next call's context matches it.
                return turn.finish(cancelled.seen, usage, interrupted=True)
            for key in usage:
                usage[key] += int((reply.usage or {}).get(key, 0))
            if not reply.tool_calls:
                return turn.finish(reply.content or "", usage)
            batch = (
                []
                if not reply.content
                else [NewEvent("assistant_message", {"content": reply.content})]
            )
            calls = _fresh_ids(reply.tool_calls, turn.journal, turn.session_id)
            tools = self.offered_tools()
            batch += [
                NewEvent(
                    "tool_call",
                    {
                        **(tools[c.name].call_fields if c.name in tools else {}),
                        "call_id": c.call_id,
                        "name": c.name,
                        "arguments": c.arguments,
                    },
                )
                for c in calls
            ]
            turn.append_many(batch)
            for call in calls:
                invocation = Invocation(turn.session_id, call.call_id, turn.journal.tenant)
                content, is_error = self._run_tool(invocation, call.name, call.arguments)
                turn.append("tool_result", _result(call.call_id, content, is_error))
        return turn.finish(
            f"(stopped after {self.max_steps} model calls without a final answer)", usage
        )

    def _ask(self, messages: list[dict[str, Any]], turn: _Turn) -> ModelReply:
        streams = hasattr(self.model, "stream")
        wanted = turn.on_delta is not None or turn.control is not None
        if streams and (wanted or not hasattr(self.model, "complete")):
            tools = list(self.offered_tools().values())
            return stream_reply(self.model, messages, tools, turn.on_delta, turn.control)
        try:
            reply = self.model.complete(messages, list(self.offered_tools().values()))
        except ModelError:
            raise
        except Exception as exc:  # a model adapter's own failure: the turn stays resumable
            raise ModelError(f"the model failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(reply, ModelReply):
            raise ModelError(f"the model returned {type(reply).__name__}, not a ModelReply")
        return reply

    def _run_tool(self, invocation: Invocation, name: str, arguments: str) -> tuple[str, bool]:
        content, is_error = self._call_tool(invocation, name, arguments)
        return _storable(content), is_error

    def _call_tool(self, invocation: Invocation, name: str, arguments: str) -> tuple[str, bool]:
        tool = self.offered_tools().get(name)
        if tool is None:
            why = None if self._mcp is None else self._mcp.missing(name)
            return f"{ERROR_PREFIX}{why or f'there is no tool named {name!r}'}", True
        try:
            parsed = json.loads(arguments or "{}")
            if not isinstance(parsed, dict):
                raise ValueError("arguments must be a JSON object")
        except RecursionError:
            return f"{ERROR_PREFIX}bad arguments for {name}: nested too deep", True
        except ValueError as exc:
            return f"{ERROR_PREFIX}bad arguments for {name}: {exc}", True
        try:
            result = tool.function(parsed, invocation)
        except ToolFailed as exc:
            return f"{ERROR_PREFIX}{exc}", True
        except Exception as exc:  # the tool's failure is the model's to handle
            return f"{ERROR_PREFIX}{type(exc).__name__}: {exc}", True
        if isinstance(result, str):
            return result, False
        return json.dumps(result, ensure_ascii=False), False


def _fresh_ids(
    calls: Sequence[RequestedCall], journal: Journal, session_id: str
) -> list[RequestedCall]:
    """The calls, with any call id the session (or this reply) used before renamed: a model that
    numbers its calls over a cut context, or a server that reuses ids, must not wedge the turn
    (call ids are unique per session). The model sees the new ids in the replay."""
    fresh: list[RequestedCall] = []
    for call in calls:
        call_id, n = call.call_id, 1
        while any(call_id == c.call_id for c in fresh) or journal.tool_calls(
            session_id, call_ids=[call_id]
        ):
            n += 1
            call_id = f"{call.call_id}_{n}"
        fresh.append(replace(call, call_id=call_id))
    return fresh


def _storable(text: str) -> str:
    """A tool's result as the journal stores it: U+0000 and lone surrogates, which a tool (an MCP
    server, an API) may send and the journal refuses, become U+FFFD rather than cut the turn."""
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _result(call_id: str, content: str, is_error: bool) -> dict[str, Any]:
    payload: dict[str, Any] = {"call_id": call_id, "content": content}
    if is_error:
        payload["is_error"] = True
    return payload


class _Turn:
    """The appends of one turn, each expecting the seq the previous one left.

    Events that are not part of any turn (task events, say, from a tool or a worker on the same
    session) may land between two of the turn's appends; the turn then expects the seq after
    them. Any turn event in between means someone else is talking: `Conflict`.
    """

    def __init__(
        self,
        journal: Journal,
        session_id: str,
        on_event: EventHook | None,
        last_seq: int = 0,
        on_delta: DeltaHook | None = None,
        control: TurnControl | None = None,
    ) -> None:
        self.journal = journal
        self.session_id = session_id
        self.on_event = on_event
        self.on_delta = on_delta
        self.control = control
        self.last_seq = last_seq
        self.events: list[Event] = []

    def wrote(self, events: list[Event]) -> None:
        self.last_seq = events[-1].seq
        for event in events:
            self.events.append(event)
            if self.on_event is not None:
                self.on_event(event)

    def append(self, type_: str, payload: dict[str, Any]) -> Event:
        self.append_many([NewEvent(type_, payload)])
        return self.events[-1]

    def append_many(self, batch: list[NewEvent]) -> tuple[list[Event], bool]:
        """Append the batch; (the originals, False) if it was an idempotent repeat."""
        while True:
            try:
                written, created = self.journal.append_many_ex(
                    self.session_id, batch, expected_seq=self.last_seq
                )
            except Conflict:
                between = self.journal.events(self.session_id, after=self.last_seq, limit=MAX_PAGE)
                if not between or any(e.type in TURN_EVENTS for e in between):
                    raise
                self.last_seq = between[-1].seq
                continue
            if created:
                self.wrote(written)
            return written, created

    def finish(self, reply: str, usage: dict[str, int], interrupted: bool = False) -> TurnResult:
        payload: dict[str, Any] = {"content": reply}
        if any(usage.values()):
            payload["usage"] = usage
        if interrupted:
            payload["interrupted"] = True
        self.append("assistant_message", payload)
        return TurnResult(self.session_id, reply, self.events)


def _raise_if_abandoned(control: TurnControl) -> None:
    if control.abandoned:
        raise TurnAbandoned(
            "the turn was stopped unfinished (the server is shutting down); it stays open and"
            " is finished when the agent resumes it"
        )

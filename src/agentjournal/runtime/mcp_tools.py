"""An agent's MCP servers as tools: connected with the official `mcp` SDK's client, listed, and
offered to the model as `Tool`s beside the Python ones, so that the agent loop journals and
resumes their calls exactly as it does a Python tool's.

The loop is synchronous and the SDK's client is async: every connection lives on one event loop
of its own, on a daemon thread (as the models' streams live on theirs, runtime/model_loop.py).
A connection is a task that holds the client open until it is closed; a tool call is a request
on it, awaited from the turn's thread. Connecting is lazy (the first turn that lists the tools),
and a server that could not start, or whose connection broke, is tried again on a later turn.

What can go wrong becomes an error result the model reads, never a lost turn: the server did not
start (its tools are then not offered, and a call of one, from a replayed context or a cut turn,
says why), the call timed out or the connection broke mid-call (the result says it may or may
not have taken effect), or the tool answered `isError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentjournal.errors import InvalidArgument
from agentjournal.runtime.mcp_servers import MCPServer
from agentjournal.runtime.shapes import Invocation, Tool, ToolFailed
from mcp import Client, StdioServerParameters

__all__ = ["MAX_RESULT_CHARS", "RETRY_SECONDS", "MCPTools", "exposed_name"]

log = logging.getLogger("agentjournal.runtime")

MAX_RESULT_CHARS = 100_000
"""A tool result longer than this is cut (and says so): a result is journaled and replayed into
every later model call, and a server is not trusted to keep it small."""
RETRY_SECONDS = 5.0
"""A server that failed to start is not tried again sooner than this."""
SEPARATOR = "__"
# The meta key a call carries its `Invocation.key` under: stable across a retried call, so a
# server that wants to may make its side effects idempotent with it.
INVOCATION_META = "agentjournal/invocation"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_PAGES = 100
# Errors that say the server did not run the call at all.
_REFUSALS = {types.PARSE_ERROR, types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS}

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _mcp_loop() -> asyncio.AbstractEventLoop:
    """The process' loop for MCP connections, started on first use (a daemon thread)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentjournal-mcp", daemon=True).start()
            _loop = loop
        return _loop


def exposed_name(server: str, tool: str) -> str:
    """The name the model calls `tool` of `server` by: `{server}__{tool}`, kept to what every
    model API accepts (letters, digits, `_`, `-`, at most 64); a name that does not fit is made
    to fit, with a hash of the original, so that it is the same after every restart."""
    name = f"{server}{SEPARATOR}{tool}"
    if _TOOL_NAME.match(name):
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", tool)
    return f"{server}{SEPARATOR}{cleaned}"[:55] + f"_{digest}"


@dataclass(frozen=True, slots=True)
class _Offered:
    server: MCPServer
    tools: dict[str, Tool]


class _Connection:
    """One server's client session, held open by a task on the MCP loop."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.client: Client | None = None
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._refused: int | None = None  # an HTTP server's error status, which the SDK drops

    async def _note(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._refused = response.status_code

    async def open(self) -> list[types.Tool]:
        """Start the server (or connect to it) and list its tools, within `start_timeout`."""
        self._closing = asyncio.Event()
        ready: asyncio.Future[list[types.Tool]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.server.start_timeout)
        except BaseException:
            # Whatever the holder says later is not asked for: retrieve it, unreported.
            ready.add_done_callback(lambda done: done.cancelled() or done.exception())
            await self.close()
            raise

    async def _hold(self, ready: asyncio.Future[list[types.Tool]]) -> None:
        assert self._closing is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(self._target(stack), cache=None))
                listed = await _list_tools(client)
                self.client = client
                ready.set_result(listed)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                if not isinstance(exc, Exception):
                    ready.cancel()
                elif self._refused is not None:
                    status = self._refused
                    hint = " (check its headers: a key, a token?)" if status in (401, 403) else ""
                    ready.set_exception(ConnectionError(f"it answered HTTP {status}{hint}"))
                else:
                    ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.client = None

    def _target(self, stack: contextlib.AsyncExitStack) -> Any:
        server = self.server
        if server.command is not None:
            return StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) or None,
                cwd=server.cwd,
            )
        assert server.url is not None
        http = httpx2.AsyncClient(
            headers=dict(server.headers),
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [self._note]},
        )
        stack.push_async_callback(http.aclose)
        return streamable_http_client(server.url, http_client=http)

    async def call(self, tool: str, arguments: dict[str, Any], key: str) -> types.CallToolResult:
        client = self.client
        if client is None:
            raise ConnectionError("the connection is closed")
        meta: types.RequestParamsMeta = {INVOCATION_META: key}  # type: ignore[misc]
        return await asyncio.wait_for(
            client.call_tool(tool, arguments, meta=meta), self.server.timeout
        )

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 5.0)
            except (TimeoutError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class MCPTools:
    """The tools of an agent's MCP servers, connected on first use (thread-safe)."""

    def __init__(self, servers: Sequence[MCPServer] = ()) -> None:
        self._lock = threading.Lock()
        self._servers: dict[str, MCPServer] = {}
        self._connections: dict[str, _Connection] = {}
        self._offered: dict[str, _Offered] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # name -> (when, why) it did not start
        self._start_failed: set[str] = set()  # servers whose latest start failed
        self._starting: dict[str, Future[None]] = {}  # name -> the start in progress
        self._closed = False
        self.add(servers)

    def add(self, servers: Sequence[MCPServer]) -> None:
        for server in servers:
            if not isinstance(server, MCPServer):
                raise InvalidArgument(f"mcp_servers takes MCPServer, not {type(server).__name__}")
        names = [server.name for server in servers]
        with self._lock:
            taken = [name for name in names if name in self._servers]
            if taken or len(set(names)) != len(names):
                raise InvalidArgument(f"MCP server names must be unique, got {names} {taken}")
            self._servers.update((server.name, server) for server in servers)

    @property
    def servers(self) -> list[MCPServer]:
        return list(self._servers.values())

    def tools(self) -> dict[str, Tool]:
        """Every tool of every server that is up, by the name the model calls it. Servers not
        connected yet are started first (at once, each within its `start_timeout`), and this
        waits for them, so that a first turn offers every tool. A server whose latest start
        failed is tried again in the background instead: its tools come back on a later turn,
        and no turn waits for a server that may never answer."""
        with self._lock:
            for name in list(self._offered):  # a server that ended since: start it again
                connection = self._connections.get(name)
                if connection is None or connection.client is None:
                    self._forget(name)
            now = time.monotonic()
            due = [
                server
                for name, server in self._servers.items()
                if name not in self._offered
                and name not in self._starting
                and now - self._failed.get(name, (-RETRY_SECONDS, ""))[0] >= RETRY_SECONDS
            ]
            if due and not self._closed:
                start = asyncio.run_coroutine_threadsafe(self._open(due), _mcp_loop())
                self._starting.update((server.name, start) for server in due)
            # Starts made by a turn on another thread are waited for too: a server is started
            # once, however many turns list the tools at the same moment.
            awaited = {
                start for name, start in self._starting.items() if name not in self._start_failed
            }
        # Not under the lock: every other turn of the agent lists the tools too, and a start
        # takes up to its server's `start_timeout`.
        wait(awaited)
        with self._lock:
            found: dict[str, Tool] = {}
            for offered in self._offered.values():
                for name, tool in offered.tools.items():
                    found.setdefault(name, tool)
            return found

    async def _open(self, servers: list[MCPServer]) -> None:
        async def one(server: MCPServer) -> None:
            connection = _Connection(server)
            try:
                listed = await connection.open()
                tools = {tool.name: tool for tool in (self._adapt(server, t) for t in listed)}
            except BaseException as exc:
                why = _describe(exc, server) if isinstance(exc, Exception) else "it was cancelled"
                log.warning("MCP server %r did not start: %s", server.name, why)
                await connection.close()
                self._started(server.name, why)
                if not isinstance(exc, Exception):
                    raise
                return
            if not self._started(server.name, _Offered(server, tools), connection):
                await connection.close()  # the tools were closed while it started

        await asyncio.gather(*(one(server) for server in servers))

    def _started(
        self, name: str, outcome: _Offered | str, connection: _Connection | None = None
    ) -> bool:
        """Record how a start ended: the tools offered, or why not. False if it came too late,
        after `close`: the caller closes the connection."""
        with self._lock:
            del self._starting[name]
            if isinstance(outcome, str):
                self._failed[name] = (time.monotonic(), outcome)
                self._start_failed.add(name)
                return True
            if self._closed:
                return False
            assert connection is not None
            self._failed.pop(name, None)
            self._start_failed.discard(name)
            self._connections[name] = connection
            self._offered[name] = outcome
            return True

    def _adapt(self, server: MCPServer, listed: types.Tool) -> Tool:
        remote = listed.name

        def call(arguments: dict[str, Any], invocation: Invocation) -> str:
            return self._call(server, remote, arguments, invocation)

        description = listed.description or listed.title or ""
        schema = listed.input_schema if isinstance(listed.input_schema, dict) else {}
        return Tool(
            exposed_name(server.name, remote),
            call,
            idempotent=server.is_idempotent(remote),
            description=description,
            parameters=schema or {"type": "object", "properties": {}},
            call_fields={"mcp_server": server.name, "mcp_tool": remote},
        )

    def _call(
        self, server: MCPServer, tool: str, arguments: dict[str, Any], invocation: Invocation
    ) -> str:
        connection = self._connections.get(server.name)
        if connection is None or connection.client is None:
            self._drop(server.name, connection)
            raise ToolFailed(f"MCP server {server.name!r} is not connected; try again later")
        future = asyncio.run_coroutine_threadsafe(
            connection.call(tool, arguments, invocation.key), _mcp_loop()
        )
        try:
            result = future.result()
        except TimeoutError:
            raise ToolFailed(
                f"MCP server {server.name!r} did not answer {tool} within {server.timeout:g} s"
                " (it may or may not have taken effect)"
            ) from None
        except MCPError as exc:
            if exc.code in _REFUSALS:  # it did not run the call: an unknown tool, bad arguments
                raise ToolFailed(
                    f"MCP server {server.name!r} refused {tool}: {exc.message}"
                ) from exc
            if exc.code == types.CONNECTION_CLOSED:
                self._drop(server.name, connection)
            raise ToolFailed(
                f"MCP server {server.name!r} failed during {tool}: {exc.message}"
                " (it may or may not have taken effect)"
            ) from exc
        except Exception as exc:  # the transport broke: the server may have done the work
            self._drop(server.name, connection)
            raise ToolFailed(
                f"MCP server {server.name!r} failed during {tool}: {_describe(exc, server)}"
                " (it may or may not have taken effect)"
            ) from exc
        text = _result_text(result)
        if result.is_error:
            raise ToolFailed(text or f"{tool} failed (the server gave no reason)")
        return text

    def _drop(self, name: str, connection: _Connection | None) -> None:
        """Forget a broken connection; the next listing connects again. Only if it is still the
        server's: a call that failed on a connection dropped before (calls in flight on it fail
        when it closes) must not drop the one that replaced it."""
        with self._lock:
            if self._connections.get(name) is connection:
                self._forget(name)

    def _forget(self, name: str) -> None:
        self._offered.pop(name, None)
        connection = self._connections.pop(name, None)
        self._failed[name] = (time.monotonic() - RETRY_SECONDS, "its connection broke")
        if connection is not None:
            asyncio.run_coroutine_threadsafe(connection.close(), _mcp_loop())

    def idempotent(self, name: str) -> bool:
        """Whether the tool the model calls `name` is declared idempotent, known from the
        servers' declarations alone (without connecting): for a cut turn's call."""
        found = self._owner(name)
        return found is not None and found[0].is_idempotent(found[1])

    def missing(self, name: str) -> str | None:
        """Why the tool `name` is not offered, if it is a name of one of these servers' tools."""
        found = self._owner(name)
        if found is None:
            return None
        server = found[0]
        failed = self._failed.get(server.name)
        if server.name not in self._offered and failed is not None:
            return f"MCP server {server.name!r} is not available: {failed[1]}"
        return f"MCP server {server.name!r} has no tool {found[1]!r}"

    def _owner(self, name: str) -> tuple[MCPServer, str] | None:
        server_name, separator, tool = name.partition(SEPARATOR)
        server = self._servers.get(server_name)
        return None if server is None or not separator else (server, tool)

    def close(self) -> None:
        """Stop every server this process started and close every connection."""
        with self._lock:
            self._closed = True
            starting = set(self._starting.values())
            connections = list(self._connections.values())
            self._connections.clear()
            self._offered.clear()
        wait(starting)  # each closes what it connected, seeing the tools closed
        if connections:

            async def close_all() -> None:
                await asyncio.gather(*(c.close() for c in connections))

            asyncio.run_coroutine_threadsafe(close_all(), _mcp_loop()).result()


def _describe(exc: BaseException, server: MCPServer) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {server.start_timeout:g} s"
    if type(exc) is ConnectionError:  # this module's own words
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner, server) for inner in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


def _result_text(result: types.CallToolResult) -> str:
    """A tool result as the text the model reads: its text blocks, a description of anything
    else, and the structured content when there is no text; cut at `MAX_RESULT_CHARS`."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, types.TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource {inner.uri} ({inner.mime_type or 'binary'})]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link {block.uri}: {block.name}]")
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = text[:MAX_RESULT_CHARS] + f"\n[... {cut} more characters cut]"
    return text

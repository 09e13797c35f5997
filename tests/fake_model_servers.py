"""Two small model servers on loopback that speak the providers' own wire formats, for tests and
benchmarks that must not reach the network.

- `FakeOpenAI`: `POST /v1/chat/completions`, JSON or (`"stream": true`) server-sent events in
  OpenAI's exact chunk format: a first chunk with the role, content deltas, tool-call deltas
  (index, id, type and name in a call's first fragment, then argument fragments), a last chunk
  with `finish_reason`, a usage chunk with empty `choices` when
  `stream_options.include_usage` is set, then `data: [DONE]`.
- `FakeAnthropic`: `POST /v1/messages`, JSON or streamed as Anthropic's events (`message_start`,
  `content_block_start`/`_delta`/`_stop` with `text_delta` and `input_json_delta`,
  `message_delta` with the usage, `message_stop`).

Each is a real HTTP server (uvicorn, a bare ASGI app) on 127.0.0.1 in a background thread:

    with FakeOpenAI() as server:
        server.answer(Reply(text=["Hel", "lo"], usage=(12, 2)))
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")

Each request takes the next queued `Reply` (or the `always(...)` one; with neither, a 500 saying
so). A reply scripts its chunks and its faults: an HTTP error status before any byte of a stream,
a stall (before the headers or after chunk N), a dropped connection after chunk N, or a provider
error event after chunk N (what a 500 mid-stream looks like on the wire: the status line is long
gone, so OpenAI sends `data: {"error": ...}` and Anthropic `event: error`). Every request is
recorded (`received`), with whether the client hung up before the end (`disconnected`) —
`wait_until(...)` blocks until a condition on them holds.

`Reply(stamp=True)` replaces each text chunk by `<{time.monotonic_ns()}>` taken just before the
chunk is written: a client on the same machine subtracts it from its own clock on receipt.

The SSE framing is written out by hand on purpose: the point is to produce the providers' bytes
exactly and to put faults between them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import uvicorn

__all__ = [
    "Call",
    "FakeAnthropic",
    "FakeOpenAI",
    "Received",
    "Reply",
    "parse_stamps",
    "split",
]

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Call:
    """A tool call the reply makes; `arguments` (JSON text) is streamed in `fragments` pieces."""

    call_id: str
    name: str
    arguments: str
    fragments: int = 3


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    `text`: the text chunks in order (a str is one chunk). `calls`: tool calls after the text.
    `usage`: (prompt/input tokens, completion/output tokens), or None to send none.
    Faults: `status` (not 200: an error body instead of an answer), `stall_before` seconds before
    the response starts, `stall` seconds after `stall_after` chunks, `drop_after` chunks then the
    connection is cut, `error_after` chunks then the provider's error event. A "chunk" counts
    every content or tool-call fragment sent (not the role/start/finish frames).
    `interval`: seconds between chunks. `stamp`: text chunks become send-time stamps.
    """

    text: Sequence[str] | str = ()
    calls: Sequence[Call] = ()
    usage: tuple[int, int] | None = (10, 5)
    status: int = 200
    stall_before: float = 0.0
    stall: float = 0.0
    stall_after: int = 0
    drop_after: int | None = None
    error_after: int | None = None
    interval: float = 0.0
    stamp: bool = False

    @property
    def chunks(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)

    @property
    def whole_text(self) -> str:
        return "".join(self.chunks)


def split(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` nearly equal, non-empty parts (fewer if it is shorter)."""
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out, start = [], 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def parse_stamps(text: str) -> list[int]:
    """The monotonic nanosecond stamps in text a `stamp=True` reply produced."""
    return [int(part) for part in text.replace(">", "").split("<") if part]


@dataclass
class Received:
    """A request the server got, and how its response ended."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    finished: bool = False  # the response was sent to the end (or the fault fired)
    disconnected: bool = False  # the client hung up before the end


class _DropConnection(Exception):
    """Raised inside the app to make uvicorn cut the connection mid-response."""


logging.getLogger("uvicorn.error").addFilter(
    lambda record: not (record.exc_info and isinstance(record.exc_info[1], _DropConnection))
)


class _Stream:
    """Sends one response's frames with the reply's faults between them."""

    def __init__(
        self, reply: Reply, send: Send, gone: asyncio.Event, closing: asyncio.Event
    ) -> None:
        self.reply = reply
        self._send = send
        self.gone = gone
        self.closing = closing
        self.sent_chunks = 0

    async def wait(self, seconds: float) -> None:
        """Sleep, cut short when the client hangs up or the server stops."""
        if seconds <= 0:
            return
        waiters = [asyncio.ensure_future(e.wait()) for e in (self.gone, self.closing)]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self.gone.is_set() or self.closing.is_set():
            raise _DropConnection("client gone or server stopping")

    async def start(self) -> None:
        await self._send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )

    async def frame(self, data: str, event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        await self._send(
            {
                "type": "http.response.body",
                "body": f"{head}data: {data}\n\n".encode(),
                "more_body": True,
            }
        )

    async def before_chunk(self) -> bool:
        """Apply the faults due before the next chunk; False when an error event is due (the
        caller sends it and ends)."""
        reply = self.reply
        if self.sent_chunks:
            await self.wait(reply.interval)
        if reply.stall and self.sent_chunks == reply.stall_after:
            await self.wait(reply.stall)
        if reply.drop_after is not None and self.sent_chunks >= reply.drop_after:
            raise _DropConnection(f"dropped after {self.sent_chunks} chunks")
        if self.gone.is_set():
            raise _DropConnection("client gone")
        return not (reply.error_after is not None and self.sent_chunks >= reply.error_after)

    def text_of(self, chunk: str) -> str:
        self.sent_chunks += 1
        return f"<{time.monotonic_ns()}>" if self.reply.stamp else chunk

    async def end(self) -> None:
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class _FakeModelServer:
    """The parts both fakes share: the thread, the script, the record of requests."""

    route = ""

    def __init__(self) -> None:
        self._queue: deque[Reply] = deque()
        self._keyed: dict[str, deque[Reply]] = {}
        self._always: Reply | None = None
        self.received: list[Received] = []
        self._changed = threading.Condition()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self.url = ""

    # -- scripting -------------------------------------------------------------------------

    def answer(self, *replies: Reply) -> None:
        """Queue replies: each request takes the next one."""
        self._queue.extend(replies)

    def answer_to(self, text: str, *replies: Reply) -> None:
        """Queue replies for requests whose latest user text is `text`, and only for them (a
        request for a text that has run out of replies gets a 500): a test sharing the server
        with others, or with a server retrying in the background, gets its own answers."""
        self._keyed.setdefault(text, deque()).extend(replies)

    def always(self, reply: Reply | None) -> None:
        """The reply for requests once the queue is empty."""
        self._always = reply

    def wait_until(self, condition: Callable[[list[Received]], bool], timeout: float = 10) -> None:
        """Block until `condition(received)` holds; AssertionError after `timeout` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self.received), timeout):
                raise AssertionError(f"condition not met in {timeout}s; received: {self.received}")

    def _note(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self._app,
            log_level="critical",
            access_log=False,
            lifespan="off",
            interface="asgi3",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        self._server = server

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._closing = asyncio.Event()
            loop.run_until_complete(server.serve(sockets=[sock]))
            loop.close()

        self._thread = threading.Thread(target=run, name=type(self).__name__, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        if self._loop is not None and self._closing is not None:
            self._loop.call_soon_threadsafe(self._closing.set)
        self._server.should_exit = True
        self._thread.join(10)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the ASGI app ----------------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        record = Received(scope["method"], scope["path"], headers, body)
        self.received.append(record)
        self._note()
        if scope["method"] != "POST" or scope["path"] != self.route:
            await _json(send, 404, {"error": {"message": f"no route {scope['path']}"}})
            record.finished = True
            self._note()
            return
        keyed = self._keyed.get(_user_text(body))
        if keyed is not None:
            reply = keyed.popleft() if keyed else Reply(status=500)
        else:
            reply = self._queue.popleft() if self._queue else self._always
        if reply is None:
            reply = Reply(status=500)
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        assert self._closing is not None
        stream = _Stream(reply, send, gone, self._closing)
        try:
            await stream.wait(reply.stall_before)
            if reply.status != 200:
                await _json(send, reply.status, self.error_body(reply.status), retry_soon=True)
            elif isinstance(body, dict) and body.get("stream"):
                await self.stream(body, reply, stream)
            else:
                await _json(send, 200, self.whole(body if isinstance(body, dict) else {}, reply))
            record.finished = True
        finally:
            # Read before yielding: once the response is complete, uvicorn's receive() reports
            # a disconnect too, and the watcher would set `gone` for a client that stayed.
            record.disconnected = gone.is_set()
            watcher.cancel()
            self._note()

    def error_body(self, status: int) -> dict[str, Any]:
        raise NotImplementedError

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        raise NotImplementedError

    async def stream(self, body: dict[str, Any], reply: Reply, out: _Stream) -> None:
        raise NotImplementedError


def _user_text(body: Any) -> str | None:
    """The text of the latest user message that has text (in either provider's shape)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [b.get("text", "") for b in content if isinstance(b, dict)]
            texts = [t for t in texts if t and isinstance(t, str)]
            if texts:
                return "".join(texts)
    return None


async def _json(send: Send, status: int, data: Any, retry_soon: bool = False) -> None:
    body = json.dumps(data).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_soon:  # both official clients honour it: retries in tests do not wait seconds
        headers.append((b"retry-after-ms", b"10"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- OpenAI ---------------------------------------------------------------------------------


class FakeOpenAI(_FakeModelServer):
    """OpenAI's chat completions. Point a client at `base_url` (`{url}/v1`)."""

    route = "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def error_body(self, status: int) -> dict[str, Any]:
        return {
            "error": {
                "message": f"the fake server was told to answer {status}",
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "param": None,
                "code": None,
            }
        }

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.whole_text or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in reply.calls
            ]
        data: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if reply.calls else "stop",
                }
            ],
        }
        if reply.usage is not None:
            data["usage"] = _openai_usage(reply.usage)
        return data

    async def stream(self, body: dict[str, Any], reply: Reply, out: _Stream) -> None:
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())
        model = body.get("model", "fake")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            data: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if with_usage:
                data["usage"] = None
            return json.dumps(data, ensure_ascii=False)

        async def error() -> None:
            await out.frame(json.dumps(self.error_body(500)))
            await out.end()

        await out.start()
        await out.frame(chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in reply.chunks:
            if not await out.before_chunk():
                await error()
                return
            await out.frame(chunk({"content": out.text_of(piece)}))
        for index, call in enumerate(reply.calls):
            # As OpenAI does: the call's id and name with empty arguments, then the fragments.
            if not await out.before_chunk():
                await error()
                return
            out.sent_chunks += 1
            head = {
                "index": index,
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            await out.frame(chunk({"tool_calls": [head]}))
            for fragment in split(call.arguments, call.fragments) if call.arguments else []:
                if not await out.before_chunk():
                    await error()
                    return
                out.sent_chunks += 1
                entry = {"index": index, "function": {"arguments": fragment}}
                await out.frame(chunk({"tool_calls": [entry]}))
        if not await out.before_chunk():
            await error()
            return
        await out.frame(chunk({}, "tool_calls" if reply.calls else "stop"))
        if with_usage and reply.usage is not None:
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [],
                "usage": _openai_usage(reply.usage),
            }
            await out.frame(json.dumps(data))
        await out.frame("[DONE]")
        await out.end()


def _openai_usage(usage: tuple[int, int]) -> dict[str, int]:
    prompt, completion = usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


# -- Anthropic ------------------------------------------------------------------------------


class FakeAnthropic(_FakeModelServer):
    """Anthropic's messages API. Point a client at `base_url` (the client adds `/v1/messages`)."""

    route = "/v1/messages"

    @property
    def base_url(self) -> str:
        return self.url

    def error_body(self, status: int) -> dict[str, Any]:
        kind = {500: "api_error", 529: "overloaded_error", 401: "authentication_error"}
        return {
            "type": "error",
            "error": {
                "type": kind.get(status, "invalid_request_error"),
                "message": f"the fake server was told to answer {status}",
            },
        }

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.whole_text:
            blocks.append({"type": "text", "text": reply.whole_text})
        for call in reply.calls:
            arguments = json.loads(call.arguments) if call.arguments else {}
            blocks.append(
                {"type": "tool_use", "id": call.call_id, "name": call.name, "input": arguments}
            )
        return blocks

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prompt, completion = reply.usage or (0, 0)
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }

    async def stream(self, body: dict[str, Any], reply: Reply, out: _Stream) -> None:
        prompt, completion = reply.usage or (0, 0)

        async def event(kind: str, data: dict[str, Any]) -> None:
            await out.frame(json.dumps({"type": kind, **data}, ensure_ascii=False), kind)

        async def error() -> None:
            await event("error", {"error": self.error_body(529)["error"]})
            await out.end()

        await out.start()
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1},
        }
        await event("message_start", {"message": message})
        index = 0
        if reply.chunks:
            await event(
                "content_block_start",
                {"index": index, "content_block": {"type": "text", "text": ""}},
            )
            await event("ping", {})
            for piece in reply.chunks:
                if not await out.before_chunk():
                    await error()
                    return
                delta = {"type": "text_delta", "text": out.text_of(piece)}
                await event("content_block_delta", {"index": index, "delta": delta})
            await event("content_block_stop", {"index": index})
            index += 1
        for call in reply.calls:
            block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
            await event("content_block_start", {"index": index, "content_block": block})
            fragments = split(call.arguments, call.fragments) if call.arguments else []
            for fragment in fragments:
                if not await out.before_chunk():
                    await error()
                    return
                out.sent_chunks += 1
                delta = {"type": "input_json_delta", "partial_json": fragment}
                await event("content_block_delta", {"index": index, "delta": delta})
            await event("content_block_stop", {"index": index})
            index += 1
        if not await out.before_chunk():
            await error()
            return
        stop = "tool_use" if reply.calls else "end_turn"
        await event(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        )
        await event("message_stop", {})
        await out.end()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve stamped replies until SIGTERM, in a process of its own (for benchmarks): the first
    line printed is the server's URL."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="a fake model server for benchmarks")
    parser.add_argument("--kind", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--chunks", type=int, default=50, help="text chunks per reply")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument(
        "--first-delay", type=float, default=0.0, help="seconds before the first text chunk"
    )
    args = parser.parse_args(argv)
    server = FakeOpenAI() if args.kind == "openai" else FakeAnthropic()
    reply = Reply(["x"] * args.chunks, stamp=True, interval=args.interval, stall=args.first_delay)
    server.always(reply)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    with server:
        print(server.url, flush=True)
        stop.wait()


if __name__ == "__main__":
    main()

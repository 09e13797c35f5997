"""The models the runtime ships: `OpenAIChatModel` against a small fake chat-completions server
on loopback (the standard library's HTTP server in a thread, speaking the same JSON), and
`ScriptedModel` as the demo's order agent uses it.

No test here reaches beyond 127.0.0.1: every `OPENAI_*` variable of the host is removed first.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Event, InvalidArgument, Journal, ModelError, NewEvent
from agentjournal.demo import order_agent
from agentjournal.runtime import (
    Agent,
    Invocation,
    OpenAIChatModel,
    Script,
    ScriptedModel,
    Tool,
    resume_incomplete,
)
from expected import SEED_MESSAGES, a, settled_feed, t, u

ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "AGENTJOURNAL_MODEL")
LOOKUP_PARAMETERS = {
    "type": "object",
    "properties": {"id": {"type": "integer"}},
    "required": ["id"],
}


@pytest.fixture(autouse=True)
def no_host_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeChatServer:
    """Answers each POST with the next scripted (status, body); records every request."""

    url: str
    received: list[Received] = field(default_factory=list)
    script: list[tuple[int, Any]] = field(default_factory=list)

    def answer(self, *replies: tuple[int, Any]) -> None:
        self.script.extend(replies)


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
) -> tuple[int, dict[str, Any]]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return 200, body


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture
def fake() -> Iterator[FakeChatServer]:
    state: FakeChatServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
            state.received.append(
                Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            status, reply = (
                state.script.pop(0) if state.script else (500, {"error": "nothing scripted"})
            )
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = FakeChatServer(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def models() -> Iterator[Callable[..., OpenAIChatModel]]:
    """`OpenAIChatModel(...)`, closed at the end of the test."""
    made: list[OpenAIChatModel] = []

    def make(*args: Any, **kw: Any) -> OpenAIChatModel:
        made.append(OpenAIChatModel(*args, **kw))
        return made[-1]

    yield make
    for model in made:
        model.close()


class Lookups:
    """A `lookup` tool that records each run."""

    def __init__(self) -> None:
        self.runs: list[Invocation] = []

    def tool(self) -> Tool:
        def lookup(arguments: dict[str, Any], invocation: Invocation) -> str:
            self.runs.append(invocation)
            return f"item {arguments['id']} is in stock"

        return Tool(
            "lookup",
            lookup,
            idempotent=True,
            description="Look an item up.",
            parameters=LOOKUP_PARAMETERS,
        )


def turn_types(journal: Journal, session_id: str) -> list[str]:
    return [e.type for e in journal.events(session_id)][1:]


# -- OpenAIChatModel: the wire --------------------------------------------------------------


def test_a_tool_turn_over_the_wire(
    journal: Journal, fake: FakeChatServer, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(
        completion(
            "let me look",
            [tool_call("call_a", "lookup", '{"id": 3}')],
            {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
        ),
        completion("item 3 is in stock.", usage={"prompt_tokens": 70, "completion_tokens": 8}),
    )
    lookups = Lookups()
    agent = Agent(
        models("gpt-test", base_url=fake.url, api_key="sk-arg"), [lookups.tool()], name="shop"
    )
    session = agent.create_session(journal, system_prompt="You sell things.")

    result = agent.run_turn(journal, session.session_id, "is item 3 in stock?")

    assert result.reply == "item 3 is in stock."
    assert [r.path for r in fake.received] == ["/chat/completions"] * 2
    first, second = fake.received
    assert first.method == "POST"
    assert first.headers["authorization"] == "Bearer sk-arg"
    assert first.headers["content-type"] == "application/json"
    system = {"role": "system", "content": "You sell things."}
    assert first.body == {
        "model": "gpt-test",
        "messages": [system, u("is item 3 in stock?")],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look an item up.",
                    "parameters": LOOKUP_PARAMETERS,
                },
            }
        ],
    }
    assert second.body["messages"] == [
        system,
        u("is item 3 in stock?"),
        a("let me look", ("call_a", "lookup", '{"id": 3}')),
        t("call_a", "item 3 is in stock"),
    ]
    assert lookups.runs == [Invocation(session.session_id, "call_a")]
    assert [(e.type, e.payload) for e in result.events] == [
        ("user_message", {"content": "is item 3 in stock?"}),
        ("assistant_message", {"content": "let me look"}),
        ("tool_call", {"call_id": "call_a", "name": "lookup", "arguments": '{"id": 3}'}),
        ("tool_result", {"call_id": "call_a", "content": "item 3 is in stock"}),
        (
            "assistant_message",
            {
                "content": "item 3 is in stock.",
                "usage": {"prompt_tokens": 120, "completion_tokens": 18},
            },
        ),
    ]
    stored = journal.get_session(session.session_id)
    assert (stored.prompt_tokens, stored.completion_tokens) == (120, 18)
    assert stored.turn_open is False
    assert journal.replay(session.session_id) == [*second.body["messages"], a(result.reply)]
    assert journal.verify().ok


def test_arguments_sent_as_an_object_are_journaled_as_json_text(
    journal: Journal, fake: FakeChatServer, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(completion(None, [tool_call("c1", "lookup", {"id": 4})]), completion("ok"))
    lookups = Lookups()
    agent = Agent(models("m", base_url=fake.url), [lookups.tool()])
    session = agent.create_session(journal)

    agent.run_turn(journal, session.session_id, "item 4?")

    [call] = journal.tool_calls(session.session_id)
    assert (call.arguments, call.result) == ('{"id": 4}', "item 4 is in stock")
    assert "authorization" not in fake.received[0].headers  # no key configured, none sent


def test_no_tools_no_usage(
    journal: Journal, fake: FakeChatServer, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(completion("hi!"))
    agent = Agent(models("m", base_url=fake.url + "/v1/"))
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "hi")

    [request] = fake.received
    assert request.path == "/v1/chat/completions"  # the trailing slash is not doubled
    assert request.body == {"model": "m", "messages": [u("hi")]}
    assert result.events[-1].payload == {"content": "hi!"}


def test_configuration_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, fake: FakeChatServer, models: Callable[..., OpenAIChatModel]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("AGENTJOURNAL_MODEL", "aj-model")
    monkeypatch.setenv("OPENAI_MODEL", "openai-model")
    fake.answer(completion("1"), completion("2"), completion("3"))

    assert models().complete([u("x")], []).content == "1"
    monkeypatch.delenv("AGENTJOURNAL_MODEL")
    assert models().complete([u("x")], []).content == "2"
    explicit = models("explicit", base_url=fake.url + "/v2", api_key="sk-arg")
    assert explicit.complete([u("x")], []).content == "3"

    assert [(r.path, r.headers["authorization"], r.body["model"]) for r in fake.received] == [
        ("/chat/completions", "Bearer sk-env", "aj-model"),
        ("/chat/completions", "Bearer sk-env", "openai-model"),
        ("/v2/chat/completions", "Bearer sk-arg", "explicit"),
    ]


def test_no_model_name_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(InvalidArgument, match="AGENTJOURNAL_MODEL"):
        OpenAIChatModel()
    with pytest.raises(InvalidArgument):
        OpenAIChatModel("")


# -- OpenAIChatModel: failures are ModelError and leave the turn resumable ---------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        pytest.param((500, {"error": {"message": "overloaded"}}), "500", id="http-500"),
        pytest.param((401, {"error": {"message": "bad key"}}), "401", id="http-401"),
        pytest.param((200, b"<html>not json</html>"), "not a chat completion", id="not-json"),
        pytest.param((200, {"error": "no choices"}), "not a chat completion", id="no-choices"),
        pytest.param(
            (200, {"choices": [{"message": {"content": 5}}]}),
            "not a chat completion",
            id="content-not-text",
        ),
    ],
)
def test_a_bad_answer_is_a_model_error_and_writes_only_the_user_message(
    journal: Journal,
    fake: FakeChatServer,
    models: Callable[..., OpenAIChatModel],
    reply: tuple[int, Any],
    match: str,
) -> None:
    fake.answer(reply)
    agent = Agent(models("m", base_url=fake.url))
    session = agent.create_session(journal)

    with pytest.raises(ModelError, match=match):
        agent.run_turn(journal, session.session_id, "hi")

    assert len(fake.received) == 1  # an answer is not retried
    assert turn_types(journal, session.session_id) == ["user_message"]
    assert journal.get_session(session.session_id).turn_open is True


def test_connection_refused_is_a_model_error(
    journal: Journal, models: Callable[..., OpenAIChatModel]
) -> None:
    agent = Agent(models("m", base_url=f"http://127.0.0.1:{free_port()}", timeout=5))
    session = agent.create_session(journal)

    with pytest.raises(ModelError, match="cannot reach"):
        agent.run_turn(journal, session.session_id, "hi")

    assert turn_types(journal, session.session_id) == ["user_message"]
    assert journal.get_session(session.session_id).turn_open is True


def test_a_model_error_mid_turn_is_finished_by_resume_once_the_server_works(
    journal: Journal, fake: FakeChatServer, models: Callable[..., OpenAIChatModel]
) -> None:
    lookups = Lookups()
    agent = Agent(models("m", base_url=fake.url), [lookups.tool()], name="shop")
    session = agent.create_session(journal)
    fake.answer(
        completion(None, [tool_call("c1", "lookup", '{"id": 7}')]),
        (500, {"error": "overloaded"}),
    )

    with pytest.raises(ModelError):
        agent.run_turn(journal, session.session_id, "item 7?")
    assert turn_types(journal, session.session_id) == ["user_message", "tool_call", "tool_result"]

    # Still down: resume reports the session, writes nothing, and does not raise.
    fake.answer((503, {"error": "still overloaded"}))
    before = settled_feed(journal)
    down = resume_incomplete(journal, [agent])
    assert down.finished == []
    [(failed_id, why)] = down.failed
    assert failed_id == session.session_id
    assert "ModelError" in why
    assert "503" in why
    assert settled_feed(journal) == before

    fake.answer(completion("item 7 is in stock."))
    report = resume_incomplete(journal, [agent])

    assert report.failed == []
    [finished] = report.finished
    assert finished.reply == "item 7 is in stock."
    assert [e.type for e in finished.events] == ["assistant_message"]
    assert len(lookups.runs) == 1  # the result was journaled: not run again
    assert fake.received[-1].body["messages"] == [
        u("item 7?"),
        a(None, ("c1", "lookup", '{"id": 7}')),
        t("c1", "item 7 is in stock"),
    ]
    assert journal.get_session(session.session_id).turn_open is False
    assert journal.verify().ok


# -- ScriptedModel: the demo's order agent (agentjournal.demo), built on it -------------------


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Agent, Path]:
    ledger = tmp_path / "orders.jsonl"
    monkeypatch.setenv("AGENTJOURNAL_ORDER_DELAY", "0")
    monkeypatch.setenv("AGENTJOURNAL_ORDER_LEDGER", str(ledger))
    return order_agent.build(), ledger


def payloads(events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.payload) for e in events]


def test_the_order_agent_reproduces_the_seed_conversation(
    journal: Journal, demo: tuple[Agent, Path]
) -> None:
    agent, ledger = demo
    session = agent.create_session(journal, "订单客服")
    assert session.metadata == {"agent": "demo"}

    hello = agent.run_turn(journal, session.session_id, "你好")
    count = agent.run_turn(journal, session.session_id, "帮我查一下订单数量")

    assert hello.reply == "你好！我是订单客服助手，可以帮你查询订单数量。"
    assert count.reply == "你当前有 42 个订单。"
    assert payloads(count.events) == [
        ("user_message", {"content": "帮我查一下订单数量"}),
        ("tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"}),
        ("tool_result", {"call_id": "call_1", "content": "42"}),
        ("assistant_message", {"content": "你当前有 42 个订单。"}),
    ]
    assert journal.replay(session.session_id) == SEED_MESSAGES
    assert order_agent.ledger_lines(ledger) == []  # no order taken


def test_the_order_agent_places_an_order_once(journal: Journal, demo: tuple[Agent, Path]) -> None:
    agent, ledger = demo
    session = agent.create_session(journal)
    agent.run_turn(journal, session.session_id, "帮我查一下订单数量")

    placed = agent.run_turn(journal, session.session_id, order_agent.PLACE_ORDER)
    other = agent.run_turn(journal, session.session_id, "今天天气怎么样？")

    assert placed.reply == "已下单，订单号 A-1001。"
    call = placed.events[1].payload
    assert call == {
        "call_id": "call_2",  # numbered over the session's calls
        "name": "place_order",
        "arguments": '{"item":"设计数据密集型应用"}',
    }
    assert order_agent.ledger_lines(ledger) == [
        {"key": f"{session.session_id}:call_2", "item": "设计数据密集型应用"}
    ]
    assert other.reply == order_agent.FALLBACK


def test_an_interrupted_order_is_not_placed_again_and_the_agent_says_so(
    journal: Journal, demo: tuple[Agent, Path]
) -> None:
    agent, ledger = demo
    session = agent.create_session(journal)
    journal.append_many(
        session.session_id,
        [
            NewEvent("user_message", {"content": order_agent.PLACE_ORDER}),
            NewEvent(
                "tool_call",
                {"call_id": "call_1", "name": "place_order", "arguments": '{"item":"x"}'},
            ),
        ],
    )

    report = resume_incomplete(journal, [order_agent.build()])

    [finished] = report.finished
    assert finished.reply.startswith("下单时服务中断了。为避免重复下单，我没有自动重试")
    assert finished.events[0].payload["is_error"] is True
    assert order_agent.ledger_lines(ledger) == []


def test_scripted_model_uses_the_error_reply_only_for_errors() -> None:
    model = ScriptedModel(
        {"go": Script("got {result}", tool="t", arguments={"a": 1}, on_error="failed: {result}")},
        "fallback",
    )
    asked = model.complete([u("go")], [])
    assert asked.content is None
    [request] = asked.tool_calls
    assert (request.call_id, request.name, request.arguments) == ("call_1", "t", '{"a":1}')
    called = [u("go"), a(None, ("call_1", "t", '{"a":1}'))]
    assert model.complete([*called, t("call_1", "7")], []).content == "got 7"
    assert model.complete([*called, t("call_1", "error: boom")], []).content == (
        "failed: error: boom"
    )
    assert model.complete([u("  go  ")], []).tool_calls  # the user's text is stripped
    assert model.complete([u("other")], []).content == "fallback"
    assert model.complete([], []).content == "fallback"


def test_scripted_call_ids_stay_unique_when_the_context_is_cut(
    journal: Journal, demo: tuple[Agent, Path]
) -> None:
    built, _ = demo
    agent = Agent(built.model, list(built.tools.values()), name="demo", max_context_tokens=60)
    session = agent.create_session(journal)

    for _ in range(3):
        assert agent.run_turn(journal, session.session_id, "帮我查一下订单数量").reply == (
            "你当前有 42 个订单。"
        )

    assert len({c.call_id for c in journal.tool_calls(session.session_id)}) == 3

"""The models the runtime ships, under `Agent.run_turn`: `OpenAIChatModel` against the fake
OpenAI server on loopback (tests/fake_model_servers.py: real HTTP, OpenAI's streaming chunks), and
`ScriptedModel` as the demo's order agent uses it. The streaming side of `OpenAIChatModel` is in
test_openai_model.py.

No test here reaches beyond 127.0.0.1: every `OPENAI_*` variable of the host is removed first.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
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
from fake_model_servers import Call, FakeOpenAI, Reply
from helpers.model_streams import NO_TIMEOUT, STALL_TIMEOUT

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


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


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


def streamed(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Any:
    """The body OpenAIChatModel sends: always streamed, usage asked for."""
    body: dict[str, Any] = {
        "model": "gpt-test",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    return body


def test_a_tool_turn_over_the_wire(
    journal: Journal, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(
        Reply(["let ", "me ", "look"], [Call("call_a", "lookup", '{"id": 3}')], usage=(50, 10)),
        Reply(["item 3 ", "is in stock."], usage=(70, 8)),
    )
    lookups = Lookups()
    agent = Agent(
        models("gpt-test", base_url=fake.base_url, api_key="sk-arg"),
        [lookups.tool()],
        name="shop",
    )
    session = agent.create_session(journal, system_prompt="You sell things.")

    result = agent.run_turn(journal, session.session_id, "is item 3 in stock?")

    assert result.reply == "item 3 is in stock."
    assert [r.path for r in fake.received] == ["/v1/chat/completions"] * 2
    first, second = fake.received
    assert first.method == "POST"
    assert first.headers["authorization"] == "Bearer sk-arg"
    assert first.headers["content-type"] == "application/json"
    system = {"role": "system", "content": "You sell things."}
    tool_schema = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look an item up.",
            "parameters": LOOKUP_PARAMETERS,
        },
    }
    assert first.body == streamed([system, u("is item 3 in stock?")], [tool_schema])
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


def test_two_calls_in_one_reply_and_empty_arguments(
    journal: Journal, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(
        Reply(calls=[Call("c1", "lookup", '{"id": 4}'), Call("c2", "lookup", "")], usage=None),
        Reply("ok", usage=None),
    )
    lookups = Lookups()
    agent = Agent(models("m", base_url=fake.base_url), [lookups.tool()])
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "item 4?")

    first, second = journal.tool_calls(session.session_id)
    assert (first.call_id, first.arguments, first.result) == (
        "c1",
        '{"id": 4}',
        "item 4 is in stock",
    )
    assert (second.call_id, second.arguments) == ("c2", "{}")  # no fragments: an empty object
    assert result.events[-1].payload == {"content": "ok"}  # no usage sent, none journaled
    assert "authorization" not in fake.received[0].headers  # no key configured, none sent


def test_no_tools(
    journal: Journal, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(Reply("hi!", usage=None))
    agent = Agent(models("gpt-test", base_url=fake.base_url + "/"))
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "hi")

    [request] = fake.received
    assert request.path == "/v1/chat/completions"  # the trailing slash is not doubled
    assert request.body == streamed([u("hi")])
    assert result.events[-1].payload == {"content": "hi!"}


def test_configuration_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("AGENTJOURNAL_MODEL", "aj-model")
    monkeypatch.setenv("OPENAI_MODEL", "openai-model")
    fake.answer(Reply("1"), Reply("2"), Reply("3"))

    assert models().complete([u("x")], []).content == "1"
    monkeypatch.delenv("AGENTJOURNAL_MODEL")
    assert models().complete([u("x")], []).content == "2"
    explicit = models("explicit", base_url=fake.url + "/v1", api_key="sk-arg")
    assert explicit.complete([u("x")], []).content == "3"

    assert [(r.path, r.headers["authorization"], r.body["model"]) for r in fake.received] == [
        ("/v1/chat/completions", "Bearer sk-env", "aj-model"),
        ("/v1/chat/completions", "Bearer sk-env", "openai-model"),
        ("/v1/chat/completions", "Bearer sk-arg", "explicit"),
    ]


def test_bad_arguments_are_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(InvalidArgument, match="AGENTJOURNAL_MODEL"):
        OpenAIChatModel()
    with pytest.raises(InvalidArgument):
        OpenAIChatModel("")
    with pytest.raises(InvalidArgument, match="timeout"):
        OpenAIChatModel("m", timeout=0)
    with pytest.raises(InvalidArgument, match="retries"):
        OpenAIChatModel("m", retries=-1)


# -- OpenAIChatModel: failures are ModelError and leave the turn resumable ---------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("reply", "match", "timeout"),
    [
        pytest.param(Reply(status=500), "answered 500", NO_TIMEOUT, id="http-500"),
        pytest.param(Reply(status=401), "answered 401", NO_TIMEOUT, id="http-401"),
        pytest.param(
            Reply(["a", "b"], error_after=1), "error mid-stream", NO_TIMEOUT, id="error-event"
        ),
        pytest.param(
            Reply(["a", "b"], drop_after=1), "broke off the stream", NO_TIMEOUT, id="dropped"
        ),
        pytest.param(
            Reply(["a", "b"], stall=30, stall_after=1),
            "timed out mid-stream",
            STALL_TIMEOUT,
            id="stall",
        ),
    ],
)
def test_a_failed_answer_is_a_model_error_and_writes_only_the_user_message(
    journal: Journal,
    fake: FakeOpenAI,
    models: Callable[..., OpenAIChatModel],
    reply: Reply,
    match: str,
    timeout: float,
) -> None:
    fake.answer(reply)
    agent = Agent(models("m", base_url=fake.base_url, retries=0, timeout=timeout))
    session = agent.create_session(journal)

    with pytest.raises(ModelError, match=match):
        agent.run_turn(journal, session.session_id, "hi")

    assert len(fake.received) == 1
    assert turn_types(journal, session.session_id) == ["user_message"]
    assert journal.get_session(session.session_id).turn_open is True


def test_a_server_error_is_retried_by_the_client(
    journal: Journal, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(Reply(status=503), Reply(status=500), Reply("fine"))
    agent = Agent(models("m", base_url=fake.base_url, retries=2))
    session = agent.create_session(journal)

    assert agent.run_turn(journal, session.session_id, "hi").reply == "fine"
    assert len(fake.received) == 3
    fake.answer(Reply(status=401))
    with pytest.raises(ModelError, match="401"):
        agent.run_turn(journal, session.session_id, "again")
    assert len(fake.received) == 4  # a refusal is not retried


def test_connection_refused_is_a_model_error(
    journal: Journal, models: Callable[..., OpenAIChatModel]
) -> None:
    agent = Agent(models("m", base_url=f"http://127.0.0.1:{free_port()}", retries=0, timeout=5))
    session = agent.create_session(journal)

    with pytest.raises(ModelError, match="cannot reach"):
        agent.run_turn(journal, session.session_id, "hi")

    assert turn_types(journal, session.session_id) == ["user_message"]
    assert journal.get_session(session.session_id).turn_open is True


def test_a_model_error_mid_turn_is_finished_by_resume_once_the_server_works(
    journal: Journal, fake: FakeOpenAI, models: Callable[..., OpenAIChatModel]
) -> None:
    lookups = Lookups()
    agent = Agent(models("m", base_url=fake.base_url, retries=0), [lookups.tool()], name="shop")
    session = agent.create_session(journal)
    fake.answer(Reply(calls=[Call("c1", "lookup", '{"id": 7}')]), Reply(status=500))

    with pytest.raises(ModelError):
        agent.run_turn(journal, session.session_id, "item 7?")
    assert turn_types(journal, session.session_id) == ["user_message", "tool_call", "tool_result"]

    # Still down: resume reports the session, writes nothing, and does not raise.
    fake.answer(Reply(status=503))
    before = settled_feed(journal)
    down = resume_incomplete(journal, [agent])
    assert down.finished == []
    [(failed_id, why, tenant)] = down.failed
    assert (failed_id, tenant) == (session.session_id, "default")
    assert "ModelError" in why
    assert "503" in why
    assert settled_feed(journal) == before

    fake.answer(Reply("item 7 is in stock."))
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

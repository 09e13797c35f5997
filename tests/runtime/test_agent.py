"""`Agent.run_turn` and `Agent.finish_turn` against a real journal (every backend), with small
models and tools written here: which events a turn writes and in what order, what the model and
the hooks see, how tool and model failures end up in the journal, and that a turn never runs
twice.

A rejected call must write nothing: `unchanged()` compares the whole tenant feed before and after.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from agentjournal import (
    Conflict,
    Event,
    InvalidArgument,
    Journal,
    ModelError,
    NewEvent,
    SessionNotFound,
)
from agentjournal.runtime import (
    Agent,
    Invocation,
    ModelReply,
    RequestedCall,
    Tool,
)
from agentjournal.runtime.agent import ERROR_PREFIX
from expected import a, settled_feed, t, u

WAIT = 30.0  # seconds any wait may take before the test fails instead of hanging
USAGE_1 = {"prompt_tokens": 11, "completion_tokens": 7}
USAGE_2 = {"prompt_tokens": 23, "completion_tokens": 5}


class Replies:
    """A model that answers from a list, in order (an exception in the list is raised), and keeps
    a copy of every message list and tool list it was sent."""

    def __init__(self, *replies: ModelReply | Exception) -> None:
        self.replies = list(replies)
        self.asked: list[list[dict[str, Any]]] = []
        self.tools: list[list[str]] = []

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        self.asked.append(copy.deepcopy(messages))
        self.tools.append([tool.name for tool in tools])
        if not self.replies:
            raise AssertionError("the model was asked more often than the test scripted")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class Echo:
    """A model that answers "re: <the last user message>" and counts how often it was asked."""

    def __init__(self, wait: Callable[[], object] = lambda: None) -> None:
        self.wait = wait
        self.calls = 0

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        self.calls += 1
        self.wait()
        users = [m["content"] for m in messages if m["role"] == "user"]
        return ModelReply(f"re: {users[-1]}")


class Recorder:
    """Tools whose every run is recorded as (tool name, arguments, invocation)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any], Invocation]] = []

    def tool(
        self,
        name: str,
        result: Callable[[dict[str, Any]], Any] = lambda args: "ok",
        *,
        idempotent: bool = True,
    ) -> Tool:
        def function(arguments: dict[str, Any], invocation: Invocation) -> Any:
            self.runs.append((name, arguments, invocation))
            return result(arguments)

        return Tool(name, function, idempotent=idempotent, description=f"the {name} tool")


def call(call_id: str, name: str, arguments: Any = None) -> RequestedCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return RequestedCall(call_id, name, text)


def summary(events: Sequence[Event]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.payload) for e in events]


def session_events(journal: Journal, session_id: str) -> list[Event]:
    return journal.events(session_id, limit=1000)


@contextmanager
def unchanged(journal: Journal) -> Iterator[None]:
    """The block must write nothing at all to the tenant's journal."""
    before = settled_feed(journal)
    yield
    assert settled_feed(journal) == before


def assert_openai_messages(messages: list[dict[str, Any]]) -> None:
    """What OpenAI's chat-completions accepts as input: known roles, and the results of an
    assistant message's tool calls right after it, one per call, in call order."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert pending, f"a tool message answers no open tool call: {message}"
            assert message["tool_call_id"] == pending.pop(0), message
            assert isinstance(message["content"], str)
            continue
        assert not pending, f"tool calls {pending} have no result before {message}"
        assert message["role"] in {"system", "user", "assistant"}, message
        if message["role"] == "assistant" and message.get("tool_calls"):
            for tool_call in message["tool_calls"]:
                assert tool_call["type"] == "function"
                assert isinstance(tool_call["function"]["name"], str)
                assert isinstance(tool_call["function"]["arguments"], str)
            pending = [tool_call["id"] for tool_call in message["tool_calls"]]
        else:
            assert isinstance(message["content"], str), message
    assert not pending, f"tool calls {pending} have no result"


# -- the shape of a turn -------------------------------------------------------------------


def test_a_tool_turn_writes_each_step_before_the_next(journal: Journal) -> None:
    tools = Recorder()
    model = Replies(
        ModelReply("let me add", (call("c1", "add", {"a": 1, "b": 2}),), USAGE_1),
        ModelReply("1 + 2 = 3", (), USAGE_2),
    )
    agent = Agent(model, [tools.tool("add", lambda args: str(args["a"] + args["b"]))])
    session = agent.create_session(journal, "sums")
    assert session.metadata == {"agent": "agent"}

    seen: list[Event] = []
    durable_when_seen: list[list[str]] = []
    runs_when_seen: list[int] = []

    def on_event(event: Event) -> None:
        seen.append(event)
        stored = session_events(journal, session.session_id)
        assert event in stored, "on_event ran before its event was durable"
        durable_when_seen.append([e.type for e in stored if e.seq > session.last_seq])
        runs_when_seen.append(len(tools.runs))

    result = agent.run_turn(journal, session.session_id, "what is 1 + 2?", on_event=on_event)

    stored = [e for e in session_events(journal, session.session_id) if e.seq > session.last_seq]
    assert summary(stored) == [
        ("user_message", {"content": "what is 1 + 2?"}),
        ("assistant_message", {"content": "let me add"}),
        ("tool_call", {"call_id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}),
        ("tool_result", {"call_id": "c1", "content": "3"}),
        (
            "assistant_message",
            {"content": "1 + 2 = 3", "usage": {"prompt_tokens": 34, "completion_tokens": 12}},
        ),
    ]
    assert result.reply == "1 + 2 = 3"
    assert result.created is True
    assert result.session_id == session.session_id
    assert result.events == stored
    assert seen == stored  # each event once, in order
    # The text and the call were one batch: both durable before the hook saw the first.
    assert (
        durable_when_seen[1]
        == durable_when_seen[2]
        == durable_when_seen[0]
        + [
            "assistant_message",
            "tool_call",
        ]
    )
    # The tool ran after its call was durable and before its result was written.
    assert runs_when_seen == [0, 0, 0, 1, 1]
    assert [(name, args) for name, args, _ in tools.runs] == [("add", {"a": 1, "b": 2})]

    # The model saw the user's message, then the call and its result.
    assert model.asked == [
        [u("what is 1 + 2?")],
        [u("what is 1 + 2?"), a("let me add", ("c1", "add", '{"a": 1, "b": 2}')), t("c1", "3")],
    ]
    assert model.tools == [["add"], ["add"]]
    after = journal.get_session(session.session_id)
    assert after.turn_open is False
    assert (after.prompt_tokens, after.completion_tokens) == (34, 12)
    assert journal.verify().ok


def test_the_reply_is_returned_only_after_the_assistant_message_is_stored(
    journal: Journal,
) -> None:
    agent = Agent(Echo())
    session = agent.create_session(journal)
    stored_at_hook: list[list[Event]] = []

    def on_event(event: Event) -> None:
        if event.type == "assistant_message":
            stored_at_hook.append(session_events(journal, session.session_id))

    result = agent.run_turn(journal, session.session_id, "hello", on_event=on_event)

    assert result.reply == "re: hello"
    [stored] = stored_at_hook
    assert stored[-1].type == "assistant_message"
    assert stored[-1].payload == {"content": "re: hello"}  # no usage reported: none recorded
    assert session_events(journal, session.session_id) == stored
    assert summary(result.events) == [
        ("user_message", {"content": "hello"}),
        ("assistant_message", {"content": "re: hello"}),
    ]


def test_several_tool_calls_in_one_reply_run_and_answer_in_call_order(journal: Journal) -> None:
    tools = Recorder()
    model = Replies(
        ModelReply(
            None,
            (
                call("c1", "lookup", {"id": 3}),
                call("c2", "stock", {"id": 3}),
                call("c3", "lookup", {"id": 4}),
            ),
        ),
        ModelReply("item 3 and 4: done"),
    )
    agent = Agent(
        model,
        [
            tools.tool("lookup", lambda args: {"id": args["id"], "名": f"item {args['id']}"}),
            tools.tool("stock", lambda args: "7"),
        ],
    )
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "items?")

    assert [(e.type, e.payload.get("call_id")) for e in result.events] == [
        ("user_message", None),
        ("tool_call", "c1"),
        ("tool_call", "c2"),
        ("tool_call", "c3"),
        ("tool_result", "c1"),
        ("tool_result", "c2"),
        ("tool_result", "c3"),
        ("assistant_message", None),
    ]
    assert [e.payload["content"] for e in result.events if e.type == "tool_result"] == [
        '{"id": 3, "名": "item 3"}',  # anything but a str is sent as JSON, not ASCII-escaped
        "7",
        '{"id": 4, "名": "item 4"}',
    ]
    assert [(name, inv.call_id) for name, _, inv in tools.runs] == [
        ("lookup", "c1"),
        ("stock", "c2"),
        ("lookup", "c3"),
    ]
    assert [c.status for c in journal.tool_calls(session.session_id)] == ["ok", "ok", "ok"]
    assert_openai_messages(model.asked[1])
    assert result.reply == "item 3 and 4: done"


def test_invocation_key_is_session_and_call_id(journal: Journal) -> None:
    tools = Recorder()
    model = Replies(ModelReply(None, (call("call_9", "noop"),)), ModelReply("done"))
    agent = Agent(model, [tools.tool("noop")])
    session = agent.create_session(journal)

    agent.run_turn(journal, session.session_id, "go")

    [(_, arguments, invocation)] = tools.runs
    assert arguments == {}
    assert invocation == Invocation(session.session_id, "call_9")
    assert invocation.key == f"{session.session_id}:call_9"


# -- tool failures become error results; the model still answers -----------------------------


def _boom(arguments: dict[str, Any]) -> Any:
    raise RuntimeError("the payment API is down")


@pytest.mark.parametrize(
    ("requested", "expected_error", "runs"),
    [
        pytest.param(
            call("c1", "pay", {"amount": 5}),
            "error: RuntimeError: the payment API is down",
            1,
            id="tool-raises",
        ),
        pytest.param(
            call("c1", "refund", {"amount": 5}),
            "error: there is no tool named 'refund'",
            0,
            id="unknown-tool",
        ),
        pytest.param(
            call("c1", "pay", '{"amount": 5'), "error: bad arguments for pay: ", 0, id="bad-json"
        ),
        pytest.param(
            call("c1", "pay", "[5]"), "error: bad arguments for pay: ", 0, id="json-not-object"
        ),
    ],
)
def test_a_failed_tool_call_is_an_error_result_and_the_model_answers(
    journal: Journal, requested: RequestedCall, expected_error: str, runs: int
) -> None:
    tools = Recorder()
    model = Replies(ModelReply(None, (requested,)), ModelReply("sorry, that failed"))
    agent = Agent(model, [tools.tool("pay", _boom, idempotent=False)])
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "pay 5")

    assert len(tools.runs) == runs
    [tool_result] = [e for e in result.events if e.type == "tool_result"]
    assert tool_result.payload["is_error"] is True
    assert tool_result.payload["call_id"] == "c1"
    content = tool_result.payload["content"]
    assert content.startswith(ERROR_PREFIX)
    assert content.startswith(expected_error), content
    # The model is told in the text too (the OpenAI shape has no error flag).
    assert model.asked[1][-1] == t("c1", content)
    assert result.reply == "sorry, that failed"
    assert result.events[-1].type == "assistant_message"
    [tool_call] = journal.tool_calls(session.session_id)
    assert (tool_call.status, tool_call.result) == ("error", content)
    assert journal.get_session(session.session_id).turn_open is False
    assert journal.verify().ok


# -- model failures leave the turn open; finish_turn completes it ------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(ModelError("the model is down"), id="ModelError"),
        pytest.param(TimeoutError("read timed out"), id="other-exception"),
    ],
)
def test_a_model_failure_leaves_the_turn_open_and_finish_turn_completes_it(
    journal: Journal, failure: Exception
) -> None:
    model = Replies(failure, ModelReply("here I am"))
    agent = Agent(model)
    session = agent.create_session(journal)

    with pytest.raises(ModelError) as raised:
        agent.run_turn(journal, session.session_id, "hello?")

    if not isinstance(failure, ModelError):
        assert "TimeoutError: read timed out" in str(raised.value)
        assert raised.value.__cause__ is failure
    after = journal.get_session(session.session_id)
    assert after.turn_open is True
    assert [e.type for e in session_events(journal, session.session_id)] == [
        "session_created",
        "user_message",
    ]
    assert [s.session_id for s in journal.open_turns()] == [session.session_id]

    seen: list[Event] = []
    finished = agent.finish_turn(journal, session.session_id, on_event=seen.append)

    assert finished is not None
    assert finished.reply == "here I am"
    assert summary(finished.events) == [("assistant_message", {"content": "here I am"})]
    assert seen == finished.events
    assert model.asked[1] == [u("hello?")]
    assert journal.get_session(session.session_id).turn_open is False
    assert journal.open_turns() == []
    # Nothing left to finish: None, and nothing written.
    with unchanged(journal):
        assert agent.finish_turn(journal, session.session_id) is None
    assert journal.verify().ok


def test_a_model_failure_after_a_tool_result_does_not_run_the_tool_again(
    journal: Journal,
) -> None:
    tools = Recorder()
    model = Replies(
        ModelReply(None, (call("c1", "charge", {"cents": 100}),)),
        ModelError("503 from the model"),
        ModelReply("charged"),
    )
    agent = Agent(model, [tools.tool("charge", idempotent=False)])
    session = agent.create_session(journal)

    with pytest.raises(ModelError):
        agent.run_turn(journal, session.session_id, "charge me")

    assert journal.get_session(session.session_id).turn_open is True
    finished = agent.finish_turn(journal, session.session_id)

    assert finished is not None
    assert finished.reply == "charged"
    assert len(tools.runs) == 1
    assert [c.status for c in journal.tool_calls(session.session_id)] == ["ok"]
    assert model.asked[2] == [
        u("charge me"),
        a(None, ("c1", "charge", '{"cents": 100}')),
        t("c1", "ok"),
    ]
    assert journal.get_session(session.session_id).turn_open is False


def test_a_model_that_returns_something_else_is_a_model_error(journal: Journal) -> None:
    class Wrong:
        def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> Any:
            return "just a string"

    agent = Agent(Wrong())
    session = agent.create_session(journal)

    with pytest.raises(ModelError, match="not a ModelReply"):
        agent.run_turn(journal, session.session_id, "hi")

    assert journal.get_session(session.session_id).turn_open is True


def test_finish_turn_reruns_only_idempotent_tools(journal: Journal) -> None:
    """A cut turn with three pending calls: the idempotent one runs again under the same key,
    the non-idempotent one and one naming no tool get the interrupted error, in call order."""
    tools = Recorder()
    model = Replies(ModelReply("looked up; the payment may not have gone through"))
    agent = Agent(
        model, [tools.tool("lookup", lambda args: "found"), tools.tool("pay", idempotent=False)]
    )
    session = agent.create_session(journal)
    journal.append_many(
        session.session_id,
        [
            NewEvent("user_message", {"content": "look up and pay"}),
            NewEvent("tool_call", {"call_id": "c1", "name": "lookup", "arguments": "{}"}),
            NewEvent("tool_call", {"call_id": "c2", "name": "pay", "arguments": "{}"}),
            NewEvent("tool_call", {"call_id": "c3", "name": "gone", "arguments": "{}"}),
        ],
    )

    finished = agent.finish_turn(journal, session.session_id)

    assert finished is not None
    assert [(name, inv.key) for name, _, inv in tools.runs] == [
        ("lookup", f"{session.session_id}:c1")
    ]
    results = [e.payload for e in finished.events if e.type == "tool_result"]
    assert [r["call_id"] for r in results] == ["c1", "c2", "c3"]
    assert results[0] == {"call_id": "c1", "content": "found"}
    for interrupted in results[1:]:
        assert interrupted["is_error"] is True
        assert interrupted["content"].startswith(ERROR_PREFIX + "interrupted")
    assert finished.events[-1].type == "assistant_message"
    assert finished.reply == "looked up; the payment may not have gone through"
    assert_openai_messages(model.asked[0])
    assert journal.get_session(session.session_id).turn_open is False
    assert journal.verify().ok


# -- one turn at a time ------------------------------------------------------------------------


def test_a_turn_while_one_is_open_is_a_conflict_and_writes_nothing(journal: Journal) -> None:
    model = Replies(ModelError("down"))
    agent = Agent(model)
    session = agent.create_session(journal)
    with pytest.raises(ModelError):
        agent.run_turn(journal, session.session_id, "first")

    with unchanged(journal), pytest.raises(Conflict, match="has not ended"):
        agent.run_turn(journal, session.session_id, "second")
    with unchanged(journal), pytest.raises(Conflict):
        agent.run_turn(journal, session.session_id, "first", idempotency_key="k")

    assert len(model.asked) == 1


def test_bad_turn_arguments_write_nothing(journal: Journal) -> None:
    agent = Agent(Echo())
    session = agent.create_session(journal)

    with unchanged(journal), pytest.raises(InvalidArgument):
        agent.run_turn(journal, session.session_id, 42)  # type: ignore[arg-type]
    with unchanged(journal), pytest.raises(SessionNotFound):
        agent.run_turn(journal, "sess_nope", "hi")

    assert agent.model.calls == 0  # type: ignore[attr-defined]


def test_an_agent_refuses_a_session_that_is_not_its_own(journal: Journal) -> None:
    agent = Agent(Echo(), name="support")
    unbound = journal.create_session("plain chat").session_id
    other = Agent(Echo(), name="billing").create_session(journal).session_id
    for session_id in (unbound, other):
        with unchanged(journal), pytest.raises(Conflict, match="not bound to agent 'support'"):
            agent.run_turn(journal, session_id, "hi")
        with unchanged(journal), pytest.raises(Conflict, match="not bound to agent 'support'"):
            agent.finish_turn(journal, session_id)
    assert agent.model.calls == 0  # type: ignore[attr-defined]


def race_two_turns(journal: Journal, title: str, other: Journal | None = None) -> None:
    """Two threads start a turn on one new session at once (the second through `other`, another
    `Journal` on the same database, if given). The winner's model waits until the loser has its
    answer, so the loser tries while the winner's turn is in flight (or races it for the user
    message's append)."""
    conflict = threading.Event()
    model = Echo(wait=lambda: conflict.wait(10))
    agent = Agent(model)
    session = agent.create_session(journal, title)
    start = threading.Barrier(2)
    outcomes: dict[str, Any] = {}
    through = {"left": journal, "right": other or journal}

    def turn(text: str) -> None:
        start.wait()
        try:
            outcomes[text] = agent.run_turn(through[text], session.session_id, text).reply
        except Conflict as exc:
            outcomes[text] = exc
            conflict.set()

    threads = [threading.Thread(target=turn, args=(text,)) for text in through]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()

    conflicts = [text for text, got in outcomes.items() if isinstance(got, Conflict)]
    winners = [text for text, got in outcomes.items() if isinstance(got, str)]
    assert len(conflicts) == 1, outcomes
    assert len(winners) == 1, outcomes
    [winner] = winners
    assert outcomes[winner] == f"re: {winner}"
    assert model.calls == 1
    assert summary(session_events(journal, session.session_id)[1:]) == [
        ("user_message", {"content": winner}),
        ("assistant_message", {"content": f"re: {winner}"}),
    ]


def test_two_threads_starting_turns_on_one_session_run_exactly_one(journal: Journal) -> None:
    for round_ in range(8):  # repeated: who gets where varies
        race_two_turns(journal, f"race {round_}")
    assert journal.verify().ok


def test_two_journals_starting_turns_on_one_session_run_exactly_one(
    journal: Journal, journal_url: str
) -> None:
    """As above, through two `Journal`s on one database (two processes' worth: on PostgreSQL two
    instances, whose turn holds meet in the server, not in this process)."""
    with Journal.open(journal_url) as other:
        for round_ in range(8):
            race_two_turns(journal, f"race {round_}", other)
    assert journal.verify().ok


def test_a_repeated_idempotency_key_returns_the_finished_turn_and_writes_nothing(
    journal: Journal,
) -> None:
    tools = Recorder()
    model = Replies(
        ModelReply(None, (call("c1", "lookup"),), USAGE_1),
        ModelReply("found it", (), USAGE_2),
        ModelReply("anything else?"),
    )
    agent = Agent(model, [tools.tool("lookup")])
    session = agent.create_session(journal)
    first = agent.run_turn(journal, session.session_id, "find it", idempotency_key="turn-1")
    agent.run_turn(journal, session.session_id, "thanks")  # a later turn in between

    with unchanged(journal):
        again = agent.run_turn(journal, session.session_id, "find it", idempotency_key="turn-1")

    assert again.created is False
    assert again.reply == first.reply == "found it"
    assert again.events == first.events
    assert len(model.asked) == 3
    assert len(tools.runs) == 1


# -- limits and construction ---------------------------------------------------------------


def test_max_steps_ends_the_turn_with_an_assistant_message(journal: Journal) -> None:
    class Loops:
        calls = 0

        def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
            self.calls += 1
            return ModelReply(None, (call(f"c{self.calls}", "again"),), {"prompt_tokens": 3})

    tools = Recorder()
    model = Loops()
    agent = Agent(model, [tools.tool("again")], max_steps=2)
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "loop")

    assert model.calls == 2
    assert len(tools.runs) == 2
    assert [e.type for e in result.events] == [
        "user_message",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "assistant_message",
    ]
    assert result.reply.startswith("(stopped after 2 model calls")
    assert result.events[-1].payload == {
        "content": result.reply,
        "usage": {"prompt_tokens": 6, "completion_tokens": 0},
    }
    assert journal.get_session(session.session_id).turn_open is False


def test_agent_rejects_duplicate_tool_names_and_bad_limits() -> None:
    tools = Recorder()
    with pytest.raises(InvalidArgument, match="unique"):
        Agent(Echo(), [tools.tool("lookup"), tools.tool("pay"), tools.tool("lookup")])
    with pytest.raises(InvalidArgument):
        Agent(Echo(), max_steps=0)
    with pytest.raises(InvalidArgument):
        Agent(Echo(), max_context_tokens=0)


def test_create_session_binds_the_agent_and_keeps_other_metadata(journal: Journal) -> None:
    agent = Agent(Echo(), name="support")
    session = agent.create_session(
        journal, "help", metadata={"team": "orders", "agent": "other"}, system_prompt="be kind"
    )
    assert session.metadata == {"team": "orders", "agent": "support"}
    assert session.system_prompt == "be kind"
    assert session.title == "help"


# -- the journal a runtime leaves is valid model input ------------------------------------------


def test_replay_of_runtime_turns_is_valid_openai_input(journal: Journal) -> None:
    tools = Recorder()
    model = Replies(
        ModelReply("hello!"),
        ModelReply(
            "checking both",
            (call("c1", "lookup", {"id": 1}), call("c2", "pay", {"id": 1})),
        ),
        ModelReply("looked up; the payment failed"),
        ModelReply(None, (call("c3", "pay", {"id": 2}),)),
        ModelError("down"),
        ModelReply("I could not confirm the payment"),
    )
    agent = Agent(
        model,
        [tools.tool("lookup", lambda args: "item 1"), tools.tool("pay", _boom, idempotent=False)],
    )
    session = agent.create_session(journal, system_prompt="you sell things")
    agent.run_turn(journal, session.session_id, "hi")
    agent.run_turn(journal, session.session_id, "buy item 1")
    with pytest.raises(ModelError):
        agent.run_turn(journal, session.session_id, "buy item 2")
    agent.finish_turn(journal, session.session_id)

    replayed = journal.replay(session.session_id)

    assert isinstance(replayed, list)
    assert_openai_messages(replayed)
    error = "error: RuntimeError: the payment API is down"
    assert replayed == [
        {"role": "system", "content": "you sell things"},
        u("hi"),
        a("hello!"),
        u("buy item 1"),
        a("checking both", ("c1", "lookup", '{"id": 1}'), ("c2", "pay", '{"id": 1}')),
        t("c1", "item 1"),
        t("c2", error),
        a("looked up; the payment failed"),
        u("buy item 2"),
        a(None, ("c3", "pay", '{"id": 2}')),
        t("c3", error),
        a("I could not confirm the payment"),
    ]
    # What the model was last sent is the same list (the context fits).
    assert model.asked[-1] == replayed[:-1]


def test_a_tool_that_starts_a_task_in_its_own_session_finishes_the_turn(
    journal: Journal,
) -> None:
    def start_report(arguments: dict[str, Any], invocation: Invocation) -> str:
        return journal.create_task(invocation.session_id, "report.orders").task_id

    model = Replies(ModelReply(None, (call("c1", "start_report"),)), ModelReply("started"))
    agent = Agent(model, [Tool("start_report", start_report, idempotent=False)])
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "start the report")

    assert result.reply == "started"
    assert journal.get_session(session.session_id).turn_open is False
    assert [c.status for c in journal.tool_calls(session.session_id)] == ["ok"]


def test_a_tool_result_the_journal_cannot_store_as_it_is_does_not_cut_the_turn(
    journal: Journal,
) -> None:
    """A lone surrogate (text decoded with errors="surrogateescape", say) or U+0000 in a result
    becomes U+FFFD: the result is journaled and the turn ends."""
    model = Replies(ModelReply(None, (call("call_1", "read"),)), ModelReply("done"))
    agent = Agent(model, [Tool("read", lambda args, inv: "a\udcffb\x00c", idempotent=True)])
    session = agent.create_session(journal)
    assert agent.run_turn(journal, session.session_id, "go").reply == "done"
    [result] = [e for e in journal.events(session.session_id) if e.type == "tool_result"]
    assert result.payload["content"] == "a\ufffdb\ufffdc"

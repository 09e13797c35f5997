"""The exporter against a real OTLP/HTTP receiver on loopback (tests/helpers/otlp_receiver.py),
over journals the runtime wrote, on every backend: span names, parents, attributes, timings and
ids; the checkpoint that lets a second run send only what is new; a turn left open across runs;
a receiver that refuses a batch."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agentjournal import Conflict, Event, Journal
from agentjournal.demo.order_agent import QUERY_ORDERS, build
from agentjournal.otel.checkpoint import CHECKPOINT_TYPE, OPEN_TURNS_TYPE, CheckpointStore
from agentjournal.otel.exporter import ExportFailed, FeedExporter
from agentjournal.otel.spans import span_id, trace_id
from agentjournal.otel.turns import OpenTask
from agentjournal.runtime import Agent, ModelReply, RequestedCall, Tool
from helpers.otlp_receiver import Receiver, otlp_receiver

NS = 1_000_000


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def export(journal: Journal, receiver: Receiver, **options: Any) -> Any:
    exporter = OTLPSpanExporter(endpoint=receiver.url, timeout=5)
    try:
        return FeedExporter(journal, exporter, **options).run()
    finally:
        exporter.shutdown()


def session_events(journal: Journal, session_id: str) -> list[Event]:
    return journal.events(session_id, limit=1000)


class Steps:
    """A model that answers from a list, with usage on every reply."""

    def __init__(self, *replies: ModelReply) -> None:
        self.replies = list(replies)

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        return self.replies.pop(0)


def test_runtime_turns_arrive_as_genai_spans_with_ids_from_the_journal(
    journal: Journal, receiver: Receiver
) -> None:
    agent = build()
    session = agent.create_session(journal, "orders", model="scripted-1").session_id
    agent.run_turn(journal, session, "你好")
    agent.run_turn(journal, session, QUERY_ORDERS)
    report = export(journal, receiver)
    spans = receiver.unique()
    assert len(spans) == len(receiver.spans) == report.spans == 6
    events = {e.seq: e for e in session_events(journal, session)}
    # Turn 1: seq 2 (question) and 3 (reply). Turn 2: seq 4 question, 5 call, 6 result, 7 reply.
    assert [e.type for e in events.values()][1:] == [
        "user_message",
        "assistant_message",
        "user_message",
        "tool_call",
        "tool_result",
        "assistant_message",
    ]
    tenant = journal.tenant

    def get(kind: str, root: int, seq: int) -> Any:
        key = (
            f"{trace_id(tenant, session, root):032x}",
            f"{span_id(tenant, session, kind, seq):016x}",
        )
        return spans[key]

    agent1, chat1 = get("invoke_agent", 2, 2), get("chat", 2, 3)
    agent2, chat2a = get("invoke_agent", 4, 4), get("chat", 4, 5)
    tool, chat2b = get("execute_tool", 4, 5), get("chat", 4, 7)
    assert (agent1.name, chat1.name) == ("invoke_agent demo", "chat scripted-1")
    assert tool.name == "execute_tool query_order_count"
    assert agent1.parent_id == agent2.parent_id == ""
    assert chat1.parent_id == agent1.span_id
    assert {chat2a.parent_id, tool.parent_id, chat2b.parent_id} == {agent2.span_id}
    assert (agent2.start_ns, agent2.end_ns) == (
        events[4].created_at * NS,
        events[7].created_at * NS,
    )
    assert (tool.start_ns, tool.end_ns) == (events[5].created_at * NS, events[6].created_at * NS)
    assert (chat2b.start_ns, chat2b.end_ns) == (
        events[6].created_at * NS,
        events[7].created_at * NS,
    )
    assert tool.attributes[gen_ai.GEN_AI_TOOL_CALL_ID] == events[5].payload["call_id"]
    assert agent2.attributes[gen_ai.GEN_AI_CONVERSATION_ID] == session
    assert agent2.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert chat1.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "scripted-1"
    assert chat1.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert chat2a.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_call"]
    assert chat1.kind == 3
    assert tool.kind == 1
    assert not any("订单" in str(s.attributes) for s in spans.values())  # no content by default
    assert agent1.scope == "agentjournal.otel"
    assert agent1.schema_url.startswith("https://opentelemetry.io/schemas/")
    # The checkpoint sits in the journal, in the exporter's own session, which is not exported.
    store = CheckpointStore(journal, "default")
    assert store.load().position == report.position
    assert journal.events(store.session_id, last=1)[0].type == CHECKPOINT_TYPE

    # A second run finds nothing new; a third sends only the new turn.
    assert export(journal, receiver).spans == 0
    agent.run_turn(journal, session, "你好")
    assert export(journal, receiver).spans == 2
    assert len(receiver.spans) == len(receiver.unique()) == 8


def test_content_and_usage(journal: Journal) -> None:
    calls = (RequestedCall("c1", "lookup", '{"q": "x"}'), RequestedCall("c2", "fails", "{}"))
    model = Steps(
        ModelReply("looking", calls, usage={"prompt_tokens": 10, "completion_tokens": 3}),
        ModelReply("found x", usage={"prompt_tokens": 20, "completion_tokens": 4}),
    )

    def fails(arguments: dict[str, Any], invocation: Any) -> str:
        raise RuntimeError("down")

    tools = [Tool("lookup", lambda a, i: "x is 1", True), Tool("fails", fails, True)]
    agent = Agent(model, tools, name="helper")
    session = agent.create_session(journal, system_prompt="be brief", model="m-1").session_id
    agent.run_turn(journal, session, "what is x?")
    memory = InMemorySpanExporter()
    FeedExporter(journal, memory, capture_content=True).run()
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert sorted(spans) == [
        "chat m-1",
        "execute_tool fails",
        "execute_tool lookup",
        "invoke_agent helper",
    ]  # the two chat spans share a name
    assert len(memory.get_finished_spans()) == 5
    agent_span = spans["invoke_agent helper"]
    assert agent_span.attributes is not None
    # The runtime reports the turn's usage on its final reply: the invoke_agent span sums it.
    assert agent_span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert agent_span.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert "what is x?" in str(agent_span.attributes[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert "found x" in str(agent_span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES])
    failed = spans["execute_tool fails"]
    assert failed.status.status_code.name == "ERROR"
    assert failed.attributes is not None
    assert "down" in str(failed.attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT])
    assert spans["execute_tool lookup"].status.status_code.name == "UNSET"


def test_a_turn_open_when_the_exporter_stops_is_exported_whole_when_it_ends(
    journal: Journal, receiver: Receiver
) -> None:
    sid = journal.create_session("chat", model="m").session_id
    journal.append(sid, "user_message", {"content": "q"})
    journal.append_many(
        sid,
        [
            {"type": "assistant_message", "payload": {"content": "let me see"}},
            {"type": "tool_call", "payload": {"call_id": "c1", "name": "t", "arguments": "{}"}},
        ],
    )
    first = export(journal, receiver)
    assert (first.spans, first.open_turns) == (0, 1)
    journal.append(sid, "tool_result", {"call_id": "c1", "content": "r", "is_error": True})
    journal.append(sid, "assistant_message", {"content": "a"})
    assert export(journal, receiver).spans == 4  # a new exporter, from the checkpoint
    spans = receiver.unique()
    names = sorted(s.name for s in spans.values())
    assert names == ["chat m", "chat m", "execute_tool t", "invoke_agent"]
    root = next(s for s in spans.values() if s.name == "invoke_agent")
    assert root.start_ns == session_events(journal, sid)[1].created_at * NS
    assert next(s for s in spans.values() if s.name == "execute_tool t").status == 2


def test_a_refused_batch_leaves_the_checkpoint_where_it_was(
    journal: Journal, receiver: Receiver
) -> None:
    agent = build()
    session = agent.create_session(journal).session_id
    agent.run_turn(journal, session, "你好")
    receiver.refuse = 1
    with pytest.raises(ExportFailed):
        export(journal, receiver)
    assert CheckpointStore(journal, "default").load().position is None
    assert export(journal, receiver).spans == 2
    assert len(receiver.unique()) == 2


def test_forks_purges_and_other_tenants_are_not_exported(
    journal: Journal, receiver: Receiver
) -> None:
    agent = build()
    parent = agent.create_session(journal).session_id
    agent.run_turn(journal, parent, "你好")
    fork = journal.fork(parent, at_seq=3).session_id
    agent.run_turn(journal, fork, "你好")
    gone = agent.create_session(journal).session_id
    agent.run_turn(journal, gone, "你好")
    journal.purge_session(gone)
    other = journal.for_tenant("other")
    agent.run_turn(other, agent.create_session(other).session_id, "你好")
    export(journal, receiver)
    spans = receiver.unique().values()
    # The parent's turn once, the fork's own turn once (its copy of the parent's is not new).
    assert sorted(str(s.attributes[gen_ai.GEN_AI_CONVERSATION_ID]) for s in spans) == sorted(
        [parent, parent, fork, fork]
    )


def test_the_checkpoint_may_live_in_another_journal_for_a_replica(
    tmp_path: Any, receiver: Receiver
) -> None:
    with (
        Journal.open(tmp_path / "replica.db") as replica,
        Journal.open(tmp_path / "primary.db") as keeper,
    ):
        agent = build()
        agent.run_turn(replica, agent.create_session(replica).session_id, "你好")
        exporter = OTLPSpanExporter(endpoint=receiver.url, timeout=5)
        try:
            runs = [
                FeedExporter(replica, exporter, checkpoints=keeper).run().spans for _ in range(2)
            ]
        finally:
            exporter.shutdown()
        assert runs == [2, 0]
        assert all(not s.session_id.startswith("otel-export.") for s in replica.sessions())
        assert CheckpointStore(keeper, "default").load().position is not None


def test_two_exporters_of_one_name_cannot_both_move_the_checkpoint(journal: Journal) -> None:
    agent = build()
    session = agent.create_session(journal).session_id
    agent.run_turn(journal, session, "你好")
    other = FeedExporter(journal, InMemorySpanExporter())

    def meanwhile(spans: int) -> None:
        other.run()  # a second exporter of the name moves the checkpoint first

    first = FeedExporter(journal, InMemorySpanExporter())
    with pytest.raises(Conflict, match="another exporter named 'default'"):
        first.run(on_batch=meanwhile)
    agent.run_turn(journal, session, "你好")
    assert first.run().spans == 2  # a later run starts from the checkpoint the other wrote


@pytest.mark.parametrize("page_size", [1, 2, 3, 5])
def test_pages_that_split_a_commit_change_nothing(journal: Journal, page_size: int) -> None:
    agent = build()
    session = agent.create_session(journal).session_id
    for text in ("你好", QUERY_ORDERS, QUERY_ORDERS):
        agent.run_turn(journal, session, text)
    whole, paged = InMemorySpanExporter(), InMemorySpanExporter()
    FeedExporter(journal, whole, name="whole").run()
    FeedExporter(journal, paged, name="paged", page_size=page_size).run()

    def seen(memory: InMemorySpanExporter) -> list[Any]:
        return sorted(
            (s.context.span_id, s.name, s.start_time, s.end_time)
            for s in memory.get_finished_spans()
        )

    assert seen(paged) == seen(whole)
    assert len(seen(whole)) == 10


def test_a_conversation_that_has_the_checkpoints_session_id_is_not_written_into(
    journal: Journal,
) -> None:
    """Session ids are the caller's to choose: a conversation called `otel-export.default` is not
    the exporter's checkpoint. The exporter refuses to start (a typed error) rather than append
    checkpoints to it, and the conversation is left as it was."""
    from agentjournal import InvalidArgument

    journal.create_session("mine", session_id="otel-export.default")
    journal.append("otel-export.default", "user_message", {"content": "hello"})
    with pytest.raises(InvalidArgument, match="is not the checkpoint"):
        FeedExporter(journal, InMemorySpanExporter()).run()
    assert [e.type for e in session_events(journal, "otel-export.default")] == [
        "session_created",
        "user_message",
    ]


@pytest.mark.parametrize(
    "options", [{"page_size": 0}, {"page_size": 2.5}, {"retry_seconds": 0}, {"poll": -1}]
)
def test_bad_options_are_refused_with_nothing_written(
    journal: Journal, options: dict[str, Any]
) -> None:
    """Refused when made (or when run, for `poll_interval`), before the checkpoint's session is
    created: nothing is written."""
    from agentjournal import InvalidArgument

    options = dict(options)  # (the same dict is every backend's)
    poll = options.pop("poll", 0.2)
    with pytest.raises(InvalidArgument):
        FeedExporter(journal, InMemorySpanExporter(), **options).run(poll_interval=poll)
    assert journal.sessions() == []


def test_many_turns_that_never_end_keep_the_checkpoint_small(
    journal_url: str, receiver: Receiver
) -> None:
    # Abandoned turns stay named until they end; their list must neither outgrow the payload
    # limit (the export would stop for good) nor be written whole with every checkpoint.
    stale = [f"stale-{i:03d}-" + "x" * 100 for i in range(200)]  # ~24 kB of open turns
    with Journal.open(journal_url, max_payload_bytes=16_384) as journal:
        for sid in stale:
            journal.create_session("abandoned", session_id=sid, model="m")
            journal.append(sid, "user_message", {"content": "anyone there?"})
        first = export(journal, receiver)
        assert (first.spans, first.open_turns) == (0, 200)
        live = journal.create_session("live", model="m").session_id
        for _ in range(3):
            journal.append(live, "user_message", {"content": "q"})
            journal.append(live, "assistant_message", {"content": "a"})
            assert export(journal, receiver).spans == 2
        checkpoints = [
            e for e in session_events(journal, "otel-export.default") if e.type == CHECKPOINT_TYPE
        ]
        assert all(len(json.dumps(e.payload)) < 2_000 for e in checkpoints[-3:])
        for sid in stale[:3]:
            journal.append(sid, "assistant_message", {"content": "sorry, here now"})
        resumed = export(journal, receiver)  # a new exporter: the open turns come back
        assert (resumed.spans, resumed.open_turns) == (6, 197)
        assert CheckpointStore(journal, "default").load().turns == tuple(
            (sid, 2) for sid in stale[3:]
        )
    roots = [s for s in receiver.unique().values() if s.name == "invoke_agent"]
    assert sorted(s.attributes["gen_ai.conversation.id"] for s in roots) == sorted(
        [live] * 3 + stale[:3]
    )


def test_large_captured_content_is_sent_in_requests_a_receiver_takes(
    journal: Journal, receiver: Receiver
) -> None:
    # 64 turns of 100 kB answers are 13 MB of content attributes; one request of them would be
    # refused (413) every time, and the export would never get past it.
    receiver.max_body = 5 * 1024 * 1024
    sid = journal.create_session("long answers", model="m").session_id
    for i in range(64):
        journal.append(sid, "user_message", {"content": f"chapter {i}?"})
        journal.append(sid, "assistant_message", {"content": "é" * 50_000 + f" {i}"})
    report = export(journal, receiver, capture_content=True)
    assert report.spans == 128
    assert len(receiver.unique()) == 128
    assert receiver.requests > 1


def test_the_open_turns_and_tasks_read_back_are_those_saved_through_bases_and_changes(
    journal_url: str,
) -> None:
    # Turns and tasks opened and closed at random, saved by one store (sometimes a new one, as
    # after a restart), read back whole by another: inline lists, bases in parts, and changes.
    rng = random.Random(7)
    with Journal.open(journal_url, max_payload_bytes=4096) as journal:
        store = CheckpointStore(journal, "default")
        turns: set[tuple[str, int]] = set()
        tasks: dict[str, OpenTask] = {}
        for step in range(300):
            draw, sid = rng.random(), f"s{rng.randrange(10**6)}-" + "y" * rng.randrange(60)
            if draw < 0.4:
                turns.add((sid, rng.randrange(1, 10**9)))
            elif draw < 0.7:
                seq = rng.randrange(1, 10**9)
                parent = rng.choice([(None, None), ("invoke_agent", seq - 1), ("task", seq - 2)])
                task = OpenTask(sid, f"t{step}", "jobs.é", seq, 1_700_000_000_000, "r", *parent)
                tasks[task.task_id] = task
            elif draw < 0.85 and turns:
                turns.discard(rng.choice(sorted(turns)))
            elif tasks:
                del tasks[rng.choice(sorted(tasks))]
            store.save(str(step), turns, list(tasks.values()))
            if rng.random() < 0.3:
                store = CheckpointStore(journal, "default")
            loaded = CheckpointStore(journal, "default").load()
            assert (set(loaded.turns), set(loaded.tasks)) == (turns, set(tasks.values()))
        assert len(turns) + len(tasks) > 100
        kinds = {e.type for e in session_events(journal, "otel-export.default")}
        assert OPEN_TURNS_TYPE in kinds


def test_many_tasks_that_never_end_keep_the_checkpoint_small(
    journal_url: str, receiver: Receiver
) -> None:
    # A queue's backlog: tasks created and not taken yet stay in every checkpoint, like turns.
    with Journal.open(journal_url, max_payload_bytes=16_384) as journal:
        sid = journal.create_session("jobs").session_id
        made = [journal.create_task(sid, "nightly.report").task_id for _ in range(200)]
        first = export(journal, receiver)
        assert (first.spans, first.open_tasks) == (0, 200)
        last = journal.events("otel-export.default", last=1)[0]
        assert len(json.dumps(last.payload)) < 2_000
        for task_id in made[:3]:
            journal.cancel_task(task_id)
        resumed = export(journal, receiver)  # a new exporter: the open tasks come back
        assert (resumed.spans, resumed.open_tasks) == (3, 197)
    names = sorted(s.name for s in receiver.unique().values())
    assert names == ["task nightly.report"] * 3

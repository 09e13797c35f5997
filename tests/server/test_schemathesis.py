"""schemathesis against the app's own OpenAPI spec, in process (ASGI), in keyed mode.

Every operation of the spec is fuzzed in positive and negative mode. Each response must pass
schemathesis' checks (`CHECKS`: no 5xx, status code documented, content type documented,
headers and body conform to the documented schema, invalid data rejected) and ours: every error is
problem+json with its status; an SSE body is whole events; another tenant's session is never
served. At least `TARGET_REQUESTS` requests are sent (1,000 when `CI` is set).

The data is real: a journal on a temporary file with sessions of the fuzzed tenant (and a session
and a task of another tenant), tasks in every state for the task routes, and the demo agent served
(`create_app(agent=...)`) with sessions bound to it, so `/turns` runs real turns (JSON, or SSE when
the case asks for `text/event-stream`). Path parameters mix those ids with generated ones, most
requests carry a valid key, event types are often valid ones, a task report often names the
attempt the task is at, and a created resource is sometimes requested again (the
idempotent-repeat path). SSE GET operations (found from the spec: a 200 of `text/event-stream`)
always get `follow=false`, which ends the stream after the backlog; a streamed turn ends with the
turn. The routes of one turn (`.../turns/{turn}/stream`, `.../cancel`) get turns the server holds:
finished ones, and running ones whose model stalls until they are cancelled (those left are
cancelled when the module ends).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from agentjournal import Journal
from agentjournal.demo.order_agent import FALLBACK, SCRIPTS, build
from agentjournal.keys import ApiKeys
from agentjournal.runtime import Agent, ModelChunk, Script, ScriptedModel, TextDelta
from agentjournal.server import Limits, create_app
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

CI = bool(os.environ.get("CI"))
TARGET_REQUESTS = 1000 if CI else 200
EXAMPLES_PER_RUN = 60 if CI else 20  # per operation and generation mode
CALL_TIMEOUT = 10.0  # seconds; a follow=false stream of this data ends in milliseconds
TENANT, OTHER = "fuzz", "other"
PROBLEM_JSON = "application/problem+json"

# schemathesis' built-in checks that every response must pass.
CHECK_NAMES = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)
CHECKS = [getattr(schemathesis.checks, name) for name in CHECK_NAMES]
pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

# Strings that a boolean query parameter reads as true (pydantic's lax booleans).
TRUTHY = {"1", "on", "t", "true", "y", "yes"}
EVENT_TYPES = ("user_message", "assistant_message", "myapp.fuzz_note")
# What a PATCH whose generated body changes nothing ({} or all null) changes instead.
CHANGES = ({"title": "renamed"}, {"status": "archived"}, {"metadata": {"k": 1}}, None)

SEED_EVENTS: list[dict[str, Any]] = [
    {"type": "user_message", "payload": {"content": "hello"}, "idempotency_key": "u-1"},
    {"type": "tool_call", "payload": {"call_id": "c1", "name": "lookup", "arguments": "{}"}},
    {"type": "tool_result", "payload": {"call_id": "c1", "content": "42"}},
    {"type": "assistant_message", "payload": {"content": "It is 42.", "usage": {}}},
    {"type": "myapp.memory_saved", "payload": {"note": "ünïcode ✓", "n": [1, 2.5, None]}},
]
# Task routes by their last path segment ("read": GET /v1/tasks/{task_id}), and how many seeded
# tasks of the fuzzed tenant each gets: its own pool, so that completing or cancelling tasks in
# one operation leaves the next one tasks to act on.
TASK_POOLS = {"read": 3, "progress": 6, "complete": 6, "fail": 6, "cancel": 6}
LEASE_SECONDS = 3600.0  # the seeded claims; none expires while the module runs
# A message whose reply stalls before its first delta until the turn is cancelled.
STALL, STALLED_REPLY = "请稍等", "⏳ 还在想"
STALLED_TURNS, HELD_TURNS = 4, 2  # running (for cancel) and finished turns the server holds
TURN_FRAMES = {"text_delta", "tool_call_delta", "reset"}  # a turn stream's frames besides events


@dataclass
class Fuzz:
    schema: Any
    key: str
    spec: dict[str, Any]
    sessions: list[str]  # the fuzzed tenant's
    foreign: str  # a session of another tenant
    agent_sessions: list[str]  # the fuzzed tenant's, bound to the served agent (for /turns)
    held_turns: list[tuple[str, int]]  # (session, turn) the server holds frames of, ended
    stalled_turns: list[tuple[str, int]]  # (session, turn) running until cancelled
    tasks: dict[str, list[str]]  # the fuzzed tenant's, by task route (`TASK_POOLS`)
    foreign_task: str  # a task of another tenant
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    streamed: collections.Counter[str] = field(default_factory=collections.Counter)  # 2xx SSE
    statuses: collections.defaultdict[str, collections.Counter[int]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzz_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path | str]:
    """The fuzzed app's database: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield tmp_path_factory.mktemp("fuzz") / "journal.db"
        return
    with fresh_schema("fuzz") as schema:
        yield url_for(schema)


@pytest.fixture(scope="module")
def fuzz(fuzz_db: Path | str) -> Iterator[Fuzz]:
    db = fuzz_db
    with Journal.open(db, tenant=TENANT) as seed:
        sessions = []
        for index in range(8):
            session = seed.create_session(f"seeded {index}", system_prompt="be brief")
            seed.append_many(session.session_id, SEED_EVENTS)
            sessions.append(session.session_id)
        seed.compact(sessions[1], until_seq=4, summary="a greeting and a lookup")
        sessions.append(seed.fork(sessions[0], at_seq=2).session_id)
        seed.delete_session(sessions[2])
        agent = fuzz_agent()
        agent_sessions = []
        for index in range(4):
            session = agent.create_session(seed, f"agent {index}")
            agent.run_turn(seed, session.session_id, "你好")
            agent_sessions.append(session.session_id)
        turn_sessions = [
            agent.create_session(seed, f"turn {index}").session_id
            for index in range(STALLED_TURNS + HELD_TURNS)
        ]
        tasks, task_home = seed_tasks(seed)
        sessions.append(task_home)
        other = seed.for_tenant(OTHER)
        foreign = other.create_session("not yours").session_id
        foreign_task = other.create_task(foreign, "report.orders").task_id
        key = ApiKeys(seed.storage).create(TENANT, "fuzz")[1]
        ApiKeys(seed.storage).create(OTHER, "other")
    journal = Journal.open(db)
    app = create_app(journal, limits=Limits(requests_per_second=1e6, burst=10**6), agent=agent)
    stalling: list[threading.Thread] = []
    try:
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        # Read a whole follow=false stream (the default stops after 20 events).
        schema.config.max_stream_events = 1_000_000
        check_seeded(schema, key, [*sessions, *agent_sessions], foreign)
        held, stalled = seed_turns(schema, key, turn_sessions, stalling)
        yield Fuzz(
            schema,
            key,
            app.openapi(),
            sessions,
            foreign,
            agent_sessions,
            held,
            stalled,
            tasks,
            foreign_task,
        )
    finally:
        from schemathesis.python import asgi

        host = app.state.service.agent_host
        for log in host.frames.running():  # the stalled turns the fuzzing left running
            if log.control is not None:
                log.control.cancel()
        for thread in stalling:
            thread.join()
        shutdown = getattr(asgi, "shutdown_lifespans", None)  # closes the app's journal
        if shutdown is not None:
            shutdown()
        journal.close()


def fuzz_agent() -> Agent:
    """The demo agent, with one more message: `STALL`, whose reply stalls until cancelled."""

    async def stall(number: int, chunk: ModelChunk) -> None:
        if isinstance(chunk, TextDelta) and chunk.text.startswith(STALLED_REPLY[0]):
            await asyncio.Event().wait()  # never set: only a cancel ends this call

    demo = build()
    scripts = {**SCRIPTS, STALL: Script(STALLED_REPLY)}
    model = ScriptedModel(scripts, FALLBACK, on_chunk=stall)
    return Agent(model, list(demo.tools.values()), name=demo.name, task_handlers=demo.task_handlers)


def seed_turns(
    schema: Any, key: str, sessions: list[str], threads: list[threading.Thread]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Turns the server holds frames of, through its own /turns: `HELD_TURNS` finished ones, and
    `STALLED_TURNS` that run until cancelled (each on a thread of ours, whose request ends with
    its turn). Waits until every stalled turn has journaled its user message."""
    from schemathesis.python import asgi

    auth = {"Authorization": f"Bearer {key}"}
    stalled, held = sessions[:STALLED_TURNS], sessions[STALLED_TURNS:]
    with asgi.get_client(schema.app) as client:
        for session_id in held:
            response = client.post(
                f"/v1/sessions/{session_id}/turns", json={"content": "你好"}, headers=auth
            )
            assert response.status_code == 201, response.text

    def run_stalled(session_id: str) -> None:
        with asgi.get_client(schema.app) as client:
            client.post(f"/v1/sessions/{session_id}/turns", json={"content": STALL}, headers=auth)

    for session_id in stalled:
        thread = threading.Thread(target=run_stalled, args=(session_id,), daemon=True)
        thread.start()
        threads.append(thread)
    frames = schema.app.state.service.agent_host.frames
    with asgi.get_client(schema.app) as client:
        for session_id in stalled:  # the turn's stream exists once its user message is durable
            url = f"/v1/sessions/{session_id}/turns/2/stream"
            while client.get(url, params={"follow": "false"}, headers=auth).status_code == 404:
                threading.Event().wait(0.01)
    assert len(frames.running()) == STALLED_TURNS
    return [(s, 2) for s in held], [(s, 2) for s in stalled]


def seed_tasks(seed: Journal) -> tuple[dict[str, list[str]], str]:
    """`TASK_POOLS`' tasks in a session of their own: each has a type of its own, so a claim of
    that type takes exactly it. Most are running (attempt 1, claimed by "seed"); the first of
    each pool stays pending, and "read" also has a completed one."""
    home = seed.create_session("tasks").session_id
    pools: dict[str, list[str]] = {}
    for pool, count in TASK_POOLS.items():
        pools[pool] = []
        for index in range(count):
            task_type = f"fuzz.{pool}.{index}"
            task = seed.create_task(home, task_type, {"pool": pool, "index": index})
            if index > 0:
                task = seed.claim_task("seed", [task_type], LEASE_SECONDS) or task
                if pool == "read" and index == 2:
                    task = seed.complete_task(task.task_id, attempt=1, output={"done": True})
            pools[pool].append(task.task_id)
        # Running tasks first: Hypothesis favours the first ids, and reports need a running task.
        pools[pool] = pools[pool][1:] + pools[pool][:1]
    return pools, home


def check_seeded(schema: Any, key: str, sessions: list[str], foreign: str) -> None:
    """The seeded sessions are served to the fuzzed key and the foreign one is not, so fuzzing
    with those ids reaches real data and the tenant check means something."""
    from schemathesis.python import asgi

    auth = {"Authorization": f"Bearer {key}"}
    with asgi.get_client(schema.app) as client:
        statuses = [client.get(f"/v1/sessions/{s}", headers=auth).status_code for s in sessions]
        foreign_status = client.get(f"/v1/sessions/{foreign}", headers=auth).status_code
        anonymous = client.get("/v1/sessions").status_code
    if statuses != [200] * len(sessions) or foreign_status != 404 or anonymous != 401:
        raise RuntimeError(f"fuzz data not as seeded: {statuses} {foreign_status} {anonymous}")


def query_names(operation: Any) -> set[str]:
    parameters = operation.definition.raw.get("parameters", [])
    return {p["name"] for p in parameters if p.get("in") == "query"}


def is_sse(operation: Any) -> bool:
    ok = operation.definition.raw.get("responses", {}).get("200", {})
    return "text/event-stream" in ok.get("content", {})


def task_pool(operation: Any) -> str | None:
    """Which `TASK_POOLS` pool a task route takes its ids from (None: not a task route)."""
    path = operation.path
    if not path.startswith("/v1/tasks/{task_id}"):
        return None
    return "read" if path.endswith("}") else path.rsplit("/", 1)[-1]


def may_follow(value: Any) -> bool:
    """Whether a generated `follow` value could read as true (then the stream would not end)."""
    values = value if isinstance(value, list) else [value]
    return any(v is True or str(v).strip().lower() in TRUTHY for v in values)


def prepare(case: Any, fuzz: Fuzz, choice: dict[str, Any]) -> dict[str, str]:
    """Point the generated case at real data; `choice` holds Hypothesis' draws for this case.
    Returns headers to send over the case's own: an `Accept` in `case.headers` is overridden by
    the transport session's default `Accept: */*`, so asking a POST that may stream (a turn) for
    `text/event-stream` goes through `case.call(headers=...)`."""
    operation = case.operation
    if is_sse(operation) and operation.method.upper() == "GET":
        query = dict(case.query or {})
        if "follow" not in query or may_follow(query["follow"]):
            query["follow"] = "false"
        case.query = query
    if choice["auth"] == "valid":
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        case.headers = {**headers, "Authorization": f"Bearer {fuzz.key}"}
    elif choice["auth"] == "none" and case.headers:
        case.headers = {k: v for k, v in case.headers.items() if k.lower() != "authorization"}
    if case.path_parameters and "session_id" in case.path_parameters and choice["session"]:
        case.path_parameters = {**case.path_parameters, "session_id": choice["session"]}
    if case.path_parameters and "turn" in case.path_parameters and choice["turn"]:
        session_id, turn = choice["turn"]
        generated = case.path_parameters["turn"]
        valid = type(generated) is int and 1 <= generated < 2**63
        # A turn made invalid on purpose (negative mode) stays: replacing it would make the
        # request valid while schemathesis still expects a refusal.
        case.path_parameters = {
            **case.path_parameters,
            "session_id": session_id,
            "turn": turn if valid else generated,
        }
    if case.path_parameters and "task_id" in case.path_parameters and choice["task"]:
        case.path_parameters = {**case.path_parameters, "task_id": choice["task"]}
    if isinstance(case.body, dict) and "attempt" in case.body and choice["attempt"] is not None:
        case.body = {**case.body, "attempt": choice["attempt"]}
    if (
        operation.method.upper() == "PATCH"
        and isinstance(case.body, dict)
        and all(value is None for value in case.body.values())
        and choice["change"] is not None
    ):
        case.body = {**case.body, **choice["change"]}
    if isinstance(case.body, dict) and choice["seq"] is not None:
        seqs = {name: choice["seq"] for name in ("at_seq", "until_seq") if name in case.body}
        if seqs:
            case.body = {**case.body, **seqs}
    if (
        operation.method.upper() == "POST"
        and operation.path.endswith("/events")
        and choice["event_type"]
        and isinstance(case.body, dict)
    ):
        events = case.body.get("events") if "events" in case.body else [case.body]
        if isinstance(events, list):
            for index, event in enumerate(events):
                if isinstance(event, dict) and isinstance(event.get("payload", {}), dict):
                    event["type"] = choice["event_type"]
                    if choice["event_type"] != "myapp.fuzz_note":
                        event["payload"] = {"content": str(event.get("payload", ""))[:200]}
                    if choice["key"] is not None:
                        event["idempotency_key"] = f"{choice['key']}-{index}"
            case.body = dict(case.body)
    # A turn asks for a stream until one has streamed, then as Hypothesis draws: a fair coin
    # alone left every accepted turn unstreamed in some runs, and the stream path untested.
    if (
        is_sse(operation)
        and operation.method.upper() != "GET"
        and (choice["stream"] or not fuzz.streamed[operation.label])
    ):
        return {"Accept": "text/event-stream"}
    return {}


def check_problem(response: Any) -> None:
    """The contract: every 4xx/5xx is application/problem+json with a readable detail."""
    if response.status_code < 400:
        return
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type.startswith(PROBLEM_JSON), f"{response.status_code} as {content_type!r}"
    body = json.loads(response.content)
    assert body.get("status") == response.status_code, body
    assert isinstance(body.get("title"), str), body
    assert isinstance(body.get("type"), str), body
    assert isinstance(body.get("detail"), str), body
    assert body["detail"], body


def check_sse(response: Any, case: Any, event_schema: dict[str, Any]) -> bool:
    """An SSE body (follow=false, or a turn's): it ended; whole events, `id:` = seq or position,
    `event:` = type; no `error` frame (a turn that failed after it started streaming). Returns
    whether the response was a stream."""
    content_type = response.headers.get("content-type", [""])[0]
    if response.status_code not in (200, 201) or not content_type.startswith("text/event-stream"):
        return False
    assert not getattr(response, "stream_cut_short", False), "the stream did not end"
    text = response.content.decode("utf-8")
    if "/turns" in case.operation.path:
        check_turn_frames(text, case, event_schema)
        return True
    by_session = "{session_id}" in case.operation.path
    ids: list[str] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name in ("id", "event", "data"):
                fields[name] = value[1:] if value.startswith(" ") else value
        if "data" not in fields:
            continue
        assert fields.get("event") != "error", f"an error frame: {fields['data']}"
        event = json.loads(fields["data"])
        assert set(event) == set(event_schema["required"]), sorted(event)
        assert fields.get("event") == event["type"], (fields, event)
        assert fields.get("id") == str(event["seq"] if by_session else event["position"])
        ids.append(fields["id"])
        if by_session:
            assert event["session_id"] == case.path_parameters["session_id"], event
    assert len(set(ids)) == len(ids), f"an event sent twice: {ids}"
    if by_session:  # seqs ascend; a feed position is opaque, so only its uniqueness is checked
        assert [int(i) for i in ids] == sorted(int(i) for i in ids), ids
    return True


def check_turn_frames(text: str, case: Any, event_schema: dict[str, Any]) -> None:
    """A turn's stream: every frame has an id `{turn}:{run}:{n}`, n counting up from 1 within a
    run (0: a `reset`); journal events are whole events of the session; no `error` frame."""
    expected_n = 1
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name in ("id", "event", "data"):
                fields[name] = value[1:] if value.startswith(" ") else value
        if "data" not in fields:
            continue
        assert fields.get("event") != "error", f"an error frame: {fields['data']}"
        turn, _run, n = fields["id"].split(":")
        body = json.loads(fields["data"])
        if fields.get("event") == "reset":
            assert n == "0", fields
            expected_n = 1
            continue
        assert int(n) == expected_n, (fields["id"], expected_n)
        expected_n += 1
        if fields.get("event") in TURN_FRAMES:
            assert body["turn"] == int(turn), (fields, body)
            continue
        assert set(body) == set(event_schema["required"]), sorted(body)
        assert fields.get("event") == body["type"], (fields, body)
        assert body["session_id"] == case.path_parameters["session_id"], body
        assert body["seq"] >= int(turn), body


def check_tenant(response: Any, case: Any, fuzz: Fuzz) -> None:
    if (case.path_parameters or {}).get("session_id") == fuzz.foreign:
        assert not 200 <= response.status_code < 300, "another tenant's session was served"
    if (case.path_parameters or {}).get("task_id") == fuzz.foreign_task:
        assert not 200 <= response.status_code < 300, "another tenant's task was served"
    if (
        200 <= response.status_code < 300
        and "json" in response.headers.get("content-type", [""])[0]
    ):
        body = json.loads(response.content)
        found = body.get("tasks", [body]) if isinstance(body, dict) else []
        tenants = {task.get("tenant") for task in found if isinstance(task, dict)}
        assert tenants <= {None, TENANT}, f"another tenant's data was served: {tenants}"


def fuzz_operation(operation: Any, mode: GenerationMode, fuzz: Fuzz) -> None:
    # Hypothesis favours the first element of sampled_from: real data first, generated last.
    # A turn gets the sessions bound to the agent first (others answer 409); nothing else gets
    # them, so no other operation opens a turn in them (a user message appended) or unbinds them.
    turns = operation.path.endswith("/turns")
    own = [*fuzz.agent_sessions, *fuzz.sessions[:2]] if turns else fuzz.sessions
    session_ids = [*own, fuzz.foreign, "sess_0000000000000000", None]
    # A turn's routes get the turns the server holds: running ones first for a cancel (one
    # succeeds, the rest of that turn's cancels are 409), finished ones first for a stream.
    if operation.path.endswith("/cancel") and "{turn}" in operation.path:
        turn_pairs = [*fuzz.stalled_turns, *fuzz.held_turns]
    else:
        turn_pairs = [*fuzz.held_turns, *fuzz.stalled_turns]
    pool = task_pool(operation)
    task_ids = (
        [*fuzz.tasks[pool], fuzz.foreign_task, "task_000000000000000000000000", None]
        if pool
        else [None]
    )
    choices = st.fixed_dictionaries(
        {
            "auth": st.sampled_from(["valid"] * 8 + ["generated", "none"]),
            "session": st.sampled_from(session_ids),  # None: the generated id
            "task": st.sampled_from(task_ids),  # None: the generated id
            "turn": st.sampled_from([*turn_pairs, None]),  # None: the generated ids
            "attempt": st.sampled_from([1, None]),  # the seeded running tasks' attempt
            "stream": st.booleans(),  # /turns: ask for text/event-stream
            "event_type": st.sampled_from([*EVENT_TYPES, None]),
            "seq": st.sampled_from([2, 4, 6, 1, None]),  # valid at_seq / until_seq of the seeds
            "change": st.sampled_from(CHANGES),
            "key": st.sampled_from(["k1", "k2", None]),  # an append's idempotency_key
            "repeat": st.booleans(),
        }
    )
    event_schema = fuzz.spec["components"]["schemas"]["EventOut"]

    @given(case=operation.as_strategy(generation_mode=mode), choice=choices)
    @settings(
        max_examples=EXAMPLES_PER_RUN,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure costs no extra time
        report_multiple_bugs=False,
    )
    def run(case: Any, choice: dict[str, Any]) -> None:
        extra_headers = prepare(case, fuzz, choice)
        keyed = "idempotency-key" in {name.lower() for name in case.headers or {}} or (
            "idempotency_key" in json.dumps(case.body, default=str)
        )
        sends = 2 if choice["repeat"] or keyed else 1
        for _ in range(sends):
            response = case.call(timeout=CALL_TIMEOUT, headers=extra_headers or None)
            fuzz.requests[operation.label] += 1
            fuzz.statuses[operation.label][response.status_code] += 1
            case.validate_response(response, checks=CHECKS)
            check_problem(response)
            if check_sse(response, case, event_schema):
                fuzz.streamed[operation.label] += 1
            check_tenant(response, case, fuzz)
            if response.status_code != 201:
                break  # only a creation is worth repeating (201 again, or 200 for the same key)

    run()


def test_the_api_conforms_to_its_own_spec_under_fuzzing(fuzz: Fuzz) -> None:
    operations = [result.ok() for result in fuzz.schema.get_all_operations()]
    labels = {operation.label for operation in operations}
    assert "POST /v1/sessions/{session_id}/events" in labels, labels
    streams = [operation for operation in operations if is_sse(operation)]
    assert streams, "no SSE operation found in the spec"
    # A GET stream follows live events until told not to (?follow=false); a POST that streams
    # (a turn) ends with what it streams, which check_sse asserts of every stream fuzzed.
    for operation in streams:
        if operation.method.upper() == "GET":
            assert "follow" in query_names(operation), (
                f"{operation.label}: an SSE GET route without ?follow="
            )
    assert "POST /v1/sessions/{session_id}/turns" in {op.label for op in streams}, labels
    task_routes = {label for label in labels if "/tasks" in label}
    assert len(task_routes) >= 9, task_routes
    assert {task_pool(op) for op in operations} - {None} == set(TASK_POOLS), labels

    # Deleting and patching go last, so the other operations meet the seeded sessions intact.
    operations.sort(key=lambda operation: operation.method.upper() in ("DELETE", "PATCH"))
    failures: list[str] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz_operation(operation, mode, fuzz)
            except Unsatisfiable:
                # Nothing in this operation can be made invalid (e.g. no parameters at all).
                if mode is GenerationMode.POSITIVE:
                    failures.append(f"{operation.label}: no valid request could be generated")
            except (Exception, BaseExceptionGroup) as error:  # reported below
                # The whole chain: hypothesis wraps a failure its replay did not repeat in a
                # FlakyFailure whose message alone does not say what failed the first time.
                detail = "".join(traceback.format_exception(error))
                failures.append(f"{operation.label} [{mode.value}]:\n{detail}")

    total = sum(fuzz.requests.values())
    table = "\n".join(
        f"  {n:5d}  {label}  {dict(sorted(fuzz.statuses[label].items()))}"
        for label, n in sorted(fuzz.requests.items())
    )
    print(f"schemathesis: {total} requests\n{table}")
    assert not failures, "\n\n".join(failures) + f"\n\nrequests:\n{table}"
    assert total >= TARGET_REQUESTS, f"only {total} requests were sent:\n{table}"
    # The fuzzing reached real behaviour, not only 401/404/422, on every operation.
    unserved = [label for label in labels if not any(200 <= s < 300 for s in fuzz.statuses[label])]
    assert not unserved, f"operations that never answered 2xx: {unserved}\n{table}"
    # Every SSE operation streamed at least once (a GET's backlog, a turn's events).
    unstreamed = {op.label for op in streams} - set(fuzz.streamed)
    assert not unstreamed, f"SSE operations that never streamed: {unstreamed}\n{fuzz.streamed}"


def _resolve(schema: Any, spec: dict[str, Any]) -> Any:
    if isinstance(schema, dict) and "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return spec["components"]["schemas"][name]
    return schema


def _objects(schema: Any, spec: dict[str, Any], seen: set[int]) -> Iterator[dict[str, Any]]:
    """Every object schema reachable from `schema` (through $ref, anyOf, items, properties)."""
    schema = _resolve(schema, spec)
    if not isinstance(schema, dict) or id(schema) in seen:
        return
    seen.add(id(schema))
    if "properties" in schema:
        yield schema
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key, []):
            yield from _objects(branch, spec, seen)
    yield from _objects(schema.get("items"), spec, seen)
    for value in schema.get("properties", {}).values():
        yield from _objects(value, spec, seen)


def test_the_spec_marks_every_field_of_a_2xx_body_required(fuzz: Fuzz) -> None:
    """The contract: the OpenAPI spec marks required fields on every 2xx response (our bodies always
    carry every field, null when empty, so every documented property is required)."""
    missing: list[str] = []
    checked = 0
    for path, item in fuzz.spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                body = response.get("content", {}).get("application/json", {}).get("schema")
                for obj in _objects(body, fuzz.spec, set()):
                    checked += 1
                    unmarked = set(obj["properties"]) - set(obj.get("required", []))
                    if unmarked:
                        title = obj.get("title", "?")
                        missing.append(f"{method.upper()} {path} {status} {title}: {unmarked}")
    assert checked >= 10, checked
    assert not missing, "\n".join(missing)

"""The task routes over a real `agentjournal serve` process on loopback: queue, list and read tasks;
the worker's side (claim, progress, complete, fail, cancel); every refusal as problem+json that
writes nothing; and the demo agent's own worker running a `report.orders` task in the server.

"Nothing written" is read from the database file itself (events, sessions and tasks rows), beside
the task as the API shows it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from http_checks import assert_problem, db_counts

from agentjournal.demo.order_agent import ORDER_COUNT, REPORT_STEPS

WAIT = 30.0  # the most the demo worker may take before the test fails instead of hanging
LEASE = 600.0  # leases claimed here; none may expire while the module runs


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def unchanged(server: Any) -> Callable[[], None]:
    """Call the returned function to assert the database gained no event, session or task."""
    before = db_counts(server.db_path)

    def check() -> None:
        assert db_counts(server.db_path) == before

    return check


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def new_session(client: httpx.Client, **body: Any) -> str:
    return str(ok(client.post("/v1/sessions", json=body), 201)["session_id"])


def new_task(client: httpx.Client, session_id: str, type_: str, **body: Any) -> dict[str, Any]:
    task: dict[str, Any] = ok(
        client.post(f"/v1/sessions/{session_id}/tasks", json={"type": type_, **body}), 201
    )
    return task


def unique_type(prefix: str = "job") -> str:
    """A task type no other test uses, so a claim of it takes only this test's tasks."""
    return f"{prefix}.{secrets.token_hex(4)}"


def claim(client: httpx.Client, worker: str, types: list[str] | None) -> httpx.Response:
    body: dict[str, Any] = {"worker": worker, "lease_seconds": LEASE}
    if types is not None:
        body["types"] = types
    return client.post("/v1/tasks/claim", json=body)


def claimed(client: httpx.Client, task_type: str, worker: str = "w1") -> dict[str, Any]:
    task: dict[str, Any] = ok(claim(client, worker, [task_type]))
    return task


def get_task(client: httpx.Client, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = ok(client.get(f"/v1/tasks/{task_id}"))
    return task


def events(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    page = ok(client.get(f"/v1/sessions/{session_id}/events", params={"limit": 1000}))
    found: list[dict[str, Any]] = page["events"]
    return found


def report(client: httpx.Client, task_id: str, verb: str, **body: Any) -> httpx.Response:
    return client.post(f"/v1/tasks/{task_id}/{verb}", json=body)


def pages(client: httpx.Client, path: str, limit: int, **params: Any) -> list[list[str]]:
    """Follow `next_after` from the first page; the task ids of each page."""
    out: list[list[str]] = []
    query: dict[str, Any] = {**params, "limit": limit}
    while True:
        page = ok(client.get(path, params=query))
        out.append([task["task_id"] for task in page["tasks"]])
        assert len(out) < 100, "next_after does not end"
        if page["next_after"] is None:
            return out
        assert page["next_after"] == page["tasks"][-1]["task_id"]
        query["after"] = page["next_after"]


# -- the happy paths --------------------------------------------------------------------------


def test_create_read_and_list_a_task_and_a_sub_task(client: httpx.Client) -> None:
    session_id = new_session(client, title="tasks")
    task = new_task(client, session_id, "email.send", input={"to": "a@b.c"}, max_retries=2)
    assert {k: task[k] for k in ("session_id", "tenant", "type", "input", "status")} == {
        "session_id": session_id,
        "tenant": "default",
        "type": "email.send",
        "input": {"to": "a@b.c"},
        "status": "pending",
    }
    assert (task["attempt"], task["retry_count"], task["max_retries"]) == (0, 0, 2)
    assert (task["progress"], task["output"], task["error"], task["parent_task_id"]) == (
        0.0,
        None,
        None,
        None,
    )
    assert (task["lease_owner"], task["lease_expires_at"]) == (None, None)
    assert task["task_id"].startswith("task_")
    assert task["created_seq"] == 2
    assert get_task(client, task["task_id"]) == task

    sub = new_task(client, session_id, "email.render", parent_task_id=task["task_id"])
    assert sub["parent_task_id"] == task["task_id"]
    assert sub["input"] is None
    assert sub["max_retries"] == 3  # the default
    listed = ok(client.get(f"/v1/sessions/{session_id}/tasks"))
    assert listed == {"tasks": [task, sub], "next_after": None}

    journaled = events(client, session_id)
    assert [(e["seq"], e["type"]) for e in journaled] == [
        (1, "session_created"),
        (2, "task_created"),
        (3, "task_created"),
    ]
    assert journaled[1]["payload"]["task_id"] == task["task_id"]
    assert journaled[2]["payload"]["parent_task_id"] == task["task_id"]


def test_an_idempotency_key_repeat_answers_200_with_the_original_and_writes_nothing(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    body = {"type": "charge", "input": {"amount": 5}}
    headers = {"Idempotency-Key": "charge-1"}
    url = f"/v1/sessions/{session_id}/tasks"
    first = ok(client.post(url, json=body, headers=headers), 201)
    counts = db_counts(server.db_path)

    repeat = client.post(url, json=body, headers=headers)
    assert ok(repeat, 200) == first
    assert db_counts(server.db_path) == counts

    # The same key for another request is a conflict, not the original.
    other = client.post(url, json={**body, "input": {"amount": 6}}, headers=headers)
    assert_problem(other, 409)
    assert db_counts(server.db_path) == counts
    # Without a key, the same body is a new task.
    again = ok(client.post(url, json=body), 201)
    assert again["task_id"] != first["task_id"]
    assert ok(client.get(url))["tasks"] == [first, again]


def test_claim_progress_complete(client: httpx.Client) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    task = new_task(client, session_id, task_type, input=[1, 2])

    running = claimed(client, task_type, "worker-1")
    assert running["task_id"] == task["task_id"]
    assert (running["status"], running["attempt"], running["lease_owner"]) == (
        "running",
        1,
        "worker-1",
    )
    assert running["lease_seconds"] == LEASE
    assert isinstance(running["lease_expires_at"], int)

    half = ok(report(client, task["task_id"], "progress", attempt=1, progress=0.5, message="1/2"))
    assert (half["status"], half["progress"], half["message"]) == ("running", 0.5, "1/2")
    assert half["lease_owner"] == "worker-1"

    done = ok(report(client, task["task_id"], "complete", attempt=1, output={"sum": 3}))
    assert (done["status"], done["output"], done["progress"]) == ("completed", {"sum": 3}, 1.0)
    assert (done["lease_owner"], done["lease_expires_at"]) == (None, None)
    assert get_task(client, task["task_id"]) == done

    types = [e["type"] for e in events(client, session_id)]
    assert types == [
        "session_created",
        "task_created",
        "task_started",
        "task_progress",
        "task_completed",
    ]
    # Nothing of that type is left to claim.
    assert claim(client, "worker-1", [task_type]).status_code == 204


def test_fail_retries_until_max_retries_then_fails(client: httpx.Client) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    task = new_task(client, session_id, task_type, max_retries=1)
    task_id = task["task_id"]

    claimed(client, task_type)
    retried = ok(report(client, task_id, "fail", attempt=1, error="timeout"))
    assert (retried["status"], retried["retry_count"], retried["error"]) == (
        "pending",
        1,
        "timeout",
    )
    second = claimed(client, task_type, "w2")
    assert (second["attempt"], second["lease_owner"]) == (2, "w2")
    final = ok(report(client, task_id, "fail", attempt=2, error="timeout again"))
    assert (final["status"], final["retry_count"], final["error"]) == (
        "failed",
        1,
        "timeout again",
    )
    assert claim(client, "w3", [task_type]).status_code == 204

    # retryable=false fails at once, retries left or not.
    other = new_task(client, session_id, task_type, max_retries=5)
    claimed(client, task_type)
    gone = ok(report(client, other["task_id"], "fail", attempt=1, error="bad", retryable=False))
    assert (gone["status"], gone["retry_count"]) == ("failed", 0)


def test_cancel_takes_open_sub_tasks_along_and_ends_a_running_attempt(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    parent = new_task(client, session_id, task_type)
    child = new_task(client, session_id, "child", parent_task_id=parent["task_id"])
    done_child = new_task(client, session_id, unique_type(), parent_task_id=parent["task_id"])
    claimed(client, done_child["type"])
    ok(report(client, done_child["task_id"], "complete", attempt=1))
    running = claimed(client, task_type)

    cancelled = ok(report(client, parent["task_id"], "cancel", reason="not needed"))
    assert cancelled["status"] == "cancelled"
    assert get_task(client, child["task_id"])["status"] == "cancelled"
    assert get_task(client, done_child["task_id"])["status"] == "completed"
    assert [e["type"] for e in events(client, session_id)][-2:] == ["task_cancelled"] * 2

    # The worker that held the parent is told its attempt is over, and changes nothing.
    counts = db_counts(server.db_path)
    for verb, body in (
        ("progress", {"progress": 0.9}),
        ("complete", {"output": 1}),
        ("fail", {"error": "x"}),
    ):
        stale = report(client, parent["task_id"], verb, attempt=running["attempt"], **body)
        assert_problem(stale, 409)
    # Only open tasks can be cancelled.
    assert_problem(report(client, parent["task_id"], "cancel"), 409)
    assert_problem(report(client, done_child["task_id"], "cancel"), 409)
    assert db_counts(server.db_path) == counts
    assert get_task(client, parent["task_id"]) == cancelled


def test_claim_answers_204_with_no_body_when_nothing_is_pending(
    client: httpx.Client, unchanged: Callable[[], None]
) -> None:
    response = claim(client, "idle", [unique_type()])
    assert response.status_code == 204
    assert response.content == b""
    unchanged()


def test_claim_without_types_takes_the_oldest_pending_task_first(
    start_server: Callable[..., Any],
) -> None:
    fresh = start_server()  # a database of its own: no other test's pending tasks
    with httpx.Client(base_url=fresh.base_url, timeout=10.0) as http:
        first, second = new_session(http), new_session(http)
        queued = [
            new_task(http, first, "a")["task_id"],
            new_task(http, second, "b")["task_id"],
            new_task(http, first, "c")["task_id"],
        ]
        taken = [ok(claim(http, f"w{i}", None))["task_id"] for i in range(3)]
        assert taken == queued
        assert claim(http, "w3", None).status_code == 204
        running = ok(http.get("/v1/tasks", params={"status": "running"}))["tasks"]
        assert [(t["task_id"], t["lease_owner"]) for t in running] == [
            (task_id, f"w{i}") for i, task_id in enumerate(queued)
        ]


# -- refusals ---------------------------------------------------------------------------------


def test_a_report_from_a_stale_attempt_is_409_and_writes_nothing(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    task = new_task(client, session_id, task_type)
    task_id = task["task_id"]
    claimed(client, task_type, "slow")
    ok(report(client, task_id, "fail", attempt=1, error="lost the lease"))
    current = claimed(client, task_type, "fast")
    assert current["attempt"] == 2

    counts = db_counts(server.db_path)
    for verb, body in (
        ("progress", {"progress": 0.7, "message": "still here"}),
        ("complete", {"output": "late"}),
        ("fail", {"error": "late"}),
        ("fail", {"error": "late", "retryable": False}),
    ):
        for attempt in (1, 3):  # an earlier attempt, and one that never started
            problem = assert_problem(report(client, task_id, verb, attempt=attempt, **body), 409)
            assert "attempt" in problem["detail"]
    assert db_counts(server.db_path) == counts
    assert get_task(client, task_id) == current

    # The current attempt still may report.
    ok(report(client, task_id, "complete", attempt=2, output="on time"))
    counts = db_counts(server.db_path)
    assert_problem(report(client, task_id, "complete", attempt=2, output="twice"), 409)
    assert_problem(report(client, task_id, "progress", attempt=2, progress=1.0), 409)
    assert db_counts(server.db_path) == counts
    assert get_task(client, task_id)["output"] == "on time"


BAD_REQUESTS: list[tuple[str, str, Any]] = [
    # (verb: claim or a task route, label, body)
    ("claim", "lease_seconds zero", {"worker": "w", "lease_seconds": 0}),
    ("claim", "lease_seconds negative", {"worker": "w", "lease_seconds": -5}),
    ("claim", "lease_seconds a string", {"worker": "w", "lease_seconds": "10"}),
    ("claim", "lease_seconds over a week", {"worker": "w", "lease_seconds": 7 * 24 * 3600 + 1}),
    ("claim", "no worker", {"lease_seconds": 10}),
    ("claim", "empty worker", {"worker": ""}),
    ("claim", "empty types", {"worker": "w", "types": []}),
    ("claim", "a bad type", {"worker": "w", "types": ["has space"]}),
    ("claim", "an unknown field", {"worker": "w", "priority": 1}),
    ("progress", "progress over 1", {"attempt": 1, "progress": 1.5}),
    ("progress", "progress below 0", {"attempt": 1, "progress": -0.1}),
    ("progress", "progress a string", {"attempt": 1, "progress": "0.5"}),
    ("progress", "no attempt", {"progress": 0.5}),
    ("progress", "attempt zero", {"attempt": 0, "progress": 0.5}),
    ("progress", "no progress", {"attempt": 1}),
    ("progress", "message not a string", {"attempt": 1, "progress": 0.5, "message": 5}),
    ("complete", "no attempt", {"output": 1}),
    ("complete", "attempt a string", {"attempt": "1"}),
    ("fail", "no attempt", {"error": "x"}),
    ("fail", "no error", {"attempt": 1}),
    ("fail", "retryable not a boolean", {"attempt": 1, "error": "x", "retryable": "no"}),
    ("cancel", "reason not a string", {"reason": 1}),
]


def test_invalid_reports_and_claims_are_422_and_write_nothing(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    task = new_task(client, session_id, task_type)
    running = claimed(client, task_type)
    pending = new_task(client, session_id, task_type)  # the one a bad claim must not take
    counts = db_counts(server.db_path)

    failures = []
    for verb, label, body in BAD_REQUESTS:
        if verb == "claim":
            response = client.post("/v1/tasks/claim", json=body)
        else:
            response = report(client, task["task_id"], verb, **body)
        if response.status_code != 422:
            failures.append(f"{verb} [{label}]: {response.status_code} {response.text}")
            continue
        assert_problem(response, 422)
    assert not failures, "\n".join(failures)
    assert db_counts(server.db_path) == counts
    assert get_task(client, task["task_id"]) == running
    assert get_task(client, pending["task_id"]) == pending


def test_invalid_tasks_and_list_queries_are_422_and_write_nothing(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    other_session = new_session(client)
    parent_elsewhere = new_task(client, other_session, "parent")
    counts = db_counts(server.db_path)
    url = f"/v1/sessions/{session_id}/tasks"
    for body in (
        {},
        {"type": ""},
        {"type": "has space"},
        {"type": "x" * 129},
        {"type": 5},
        {"type": "ok", "max_retries": -1},
        {"type": "ok", "max_retries": 101},
        {"type": "ok", "max_retries": "3"},
        {"type": "ok", "unknown": True},
        {"type": "ok", "parent_task_id": ""},
        # A sub-task lives in its parent's session.
        {"type": "ok", "parent_task_id": parent_elsewhere["task_id"]},
    ):
        assert_problem(client.post(url, json=body), 422)
    for query in ({"status": "done"}, {"limit": "0"}, {"limit": "1001"}, {"after": "bad id!"}):
        assert_problem(client.get(url, params=query), 422)
        assert_problem(client.get("/v1/tasks", params=query), 422)
    assert_problem(client.get("/v1/tasks", params={"type": "has space"}), 422)
    assert db_counts(server.db_path) == counts
    assert ok(client.get(url))["tasks"] == []


def test_unknown_tasks_and_sessions_are_404_and_write_nothing(
    client: httpx.Client, server: Any
) -> None:
    session_id = new_session(client)
    counts = db_counts(server.db_path)
    missing_task = f"task_{secrets.token_hex(12)}"
    missing_session = "sess_doesnotexist00"
    for response in (
        client.get(f"/v1/tasks/{missing_task}"),
        report(client, missing_task, "progress", attempt=1, progress=0.5),
        report(client, missing_task, "complete", attempt=1),
        report(client, missing_task, "fail", attempt=1, error="x"),
        report(client, missing_task, "cancel"),
        # An unknown parent is a missing task too.
        client.post(
            f"/v1/sessions/{session_id}/tasks", json={"type": "t", "parent_task_id": missing_task}
        ),
    ):
        problem = assert_problem(response, 404)
        assert problem["title"] == "Task not found"
        assert missing_task in problem["detail"]
    for response in (
        client.post(f"/v1/sessions/{missing_session}/tasks", json={"type": "t"}),
        client.get(f"/v1/sessions/{missing_session}/tasks"),
    ):
        problem = assert_problem(response, 404)
        assert problem["title"] == "Session not found"
    assert db_counts(server.db_path) == counts
    # A filter naming a session that does not exist is an empty list, not a 404.
    found = ok(client.get("/v1/tasks", params={"session_id": missing_session}))
    assert found == {"tasks": [], "next_after": None}


# -- lists ------------------------------------------------------------------------------------


def test_task_lists_filter_by_status_type_and_session_and_page_with_next_after(
    client: httpx.Client,
) -> None:
    session_id, other_session = new_session(client), new_session(client)
    kind_a, kind_b = unique_type("a"), unique_type("b")
    made = [new_task(client, session_id, kind_a if i % 2 == 0 else kind_b) for i in range(6)]
    elsewhere = new_task(client, other_session, kind_a)
    ids = [t["task_id"] for t in made]
    ok(report(client, ids[0], "cancel"))
    ok(report(client, ids[3], "cancel"))
    assert claimed(client, kind_b)["task_id"] == ids[1]  # the oldest pending of its type
    assert claimed(client, kind_a)["task_id"] == ids[2]
    ok(report(client, ids[2], "complete", attempt=1))
    assert claimed(client, kind_a)["task_id"] == ids[4]
    ok(report(client, ids[4], "fail", attempt=1, error="bad", retryable=False))
    expected = {
        ids[0]: "cancelled",
        ids[1]: "running",
        ids[2]: "completed",
        ids[3]: "cancelled",
        ids[4]: "failed",
        ids[5]: "pending",
    }
    assert {task_id: get_task(client, task_id)["status"] for task_id in ids} == expected

    session_url = f"/v1/sessions/{session_id}/tasks"

    def listed(path: str, **params: Any) -> list[str]:
        page = ok(client.get(path, params={"limit": 1000, **params}))
        return [task["task_id"] for task in page["tasks"]]

    assert listed("/v1/tasks", session_id=session_id) == ids
    assert listed(session_url) == ids
    for status in ("pending", "running", "completed", "failed", "cancelled"):
        want = [task_id for task_id in ids if expected[task_id] == status]
        assert listed("/v1/tasks", session_id=session_id, status=status) == want, status
        assert listed(session_url, status=status) == want, status
    opened = [ids[1], ids[5]]
    assert listed("/v1/tasks", session_id=session_id, status="open") == opened
    assert listed(session_url, status="open") == opened
    assert listed("/v1/tasks", type=kind_a) == [*ids[0::2], elsewhere["task_id"]]
    assert listed("/v1/tasks", type=kind_b, session_id=session_id) == ids[1::2]
    assert listed("/v1/tasks", type=kind_a, status="cancelled") == [ids[0]]
    assert elsewhere["task_id"] in listed("/v1/tasks", status="pending", type=kind_a)

    # Paging: next_after is the last id of a full page; null once a page is short.
    assert pages(client, "/v1/tasks", 4, session_id=session_id) == [ids[:4], ids[4:]]
    assert pages(client, session_url, 2) == [ids[0:2], ids[2:4], ids[4:6], []]
    assert pages(client, session_url, 6) == [ids, []]
    assert pages(client, "/v1/tasks", 1, type=kind_b, status="cancelled") == [[ids[3]], []]
    after = ok(client.get(session_url, params={"after": ids[2], "limit": 2}))
    assert [t["task_id"] for t in after["tasks"]] == ids[3:5]
    assert after["next_after"] == ids[4]


def test_deleting_a_session_cancels_its_open_tasks(client: httpx.Client) -> None:
    session_id = new_session(client)
    task_type = unique_type()
    running_id = new_task(client, session_id, task_type)["task_id"]
    pending_id = new_task(client, session_id, task_type)["task_id"]
    finished = new_task(client, session_id, unique_type())
    claimed(client, finished["type"])
    ok(report(client, finished["task_id"], "complete", attempt=1, output="kept"))
    assert claimed(client, task_type)["task_id"] == running_id

    ok(client.delete(f"/v1/sessions/{session_id}"))
    assert get_task(client, pending_id)["status"] == "cancelled"
    assert get_task(client, running_id)["status"] == "cancelled"
    assert get_task(client, finished["task_id"])["output"] == "kept"
    assert get_task(client, finished["task_id"])["status"] == "completed"
    tail = [(e["type"], e["payload"].get("task_id")) for e in events(client, session_id)[-3:]]
    assert sorted(tail[:2]) == sorted(
        [("task_cancelled", pending_id), ("task_cancelled", running_id)]
    )
    assert tail[2] == ("session_updated", None)
    # The worker on the running one is told to stop.
    assert_problem(report(client, running_id, "progress", attempt=1, progress=0.5), 409)
    assert ok(client.get("/v1/tasks", params={"session_id": session_id, "status": "open"})) == {
        "tasks": [],
        "next_after": None,
    }


# -- the agent's worker in the server ---------------------------------------------------------


@pytest.fixture(scope="module")
def agent_client(start_server: Callable[..., Any]) -> Iterator[httpx.Client]:
    """A server running the demo agent, whose worker takes `report.orders` tasks (steps of
    10 ms instead of 0.3 s)."""
    running = start_server("--agent", "demo", env={"AGENTJOURNAL_REPORT_STEP": "0.01"})
    with httpx.Client(base_url=running.base_url, timeout=10.0) as http:
        yield http


def test_the_demo_agents_worker_runs_a_report_task_to_completion(
    agent_client: httpx.Client,
) -> None:
    session_id = new_session(agent_client, title="订单报表")
    task = new_task(agent_client, session_id, "report.orders")
    other = new_task(agent_client, session_id, unique_type("not.handled"))

    deadline = time.monotonic() + WAIT
    seen_progress: set[float] = set()
    while True:
        state = get_task(agent_client, task["task_id"])
        seen_progress.add(state["progress"])
        if state["status"] not in ("pending", "running"):
            break
        assert time.monotonic() < deadline, f"the report did not finish: {state}"
        time.sleep(0.02)
    assert state["status"] == "completed", state
    assert state["output"] == {"orders": ORDER_COUNT, "resumed_from": 0}
    assert (state["attempt"], state["progress"], state["error"]) == (1, 1.0, None)
    assert state["message"] == f"step {REPORT_STEPS}/{REPORT_STEPS}"

    journaled = [e for e in events(agent_client, session_id) if e["payload"].get("task_id")]
    mine = [e for e in journaled if e["payload"]["task_id"] == task["task_id"]]
    assert [e["type"] for e in mine] == [
        "task_created",
        "task_started",
        *["task_progress"] * REPORT_STEPS,
        "task_completed",
    ]
    progress = [e["payload"]["progress"] for e in mine if e["type"] == "task_progress"]
    assert progress == [step / REPORT_STEPS for step in range(1, REPORT_STEPS + 1)]
    # The worker takes only the types it has handlers for.
    assert get_task(agent_client, other["task_id"])["status"] == "pending"

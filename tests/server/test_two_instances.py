"""Two `agentjournal serve` processes on one PostgreSQL schema, as docs/postgres.md promises:
appends made through instance A reach live streams on instance B (LISTEN/NOTIFY), a task queued
through A is claimed, advanced and completed through B while A is killed and restarted on its
port, API keys live in the database so one key works on every instance, and `verify` finds the
shared journal clean afterwards.

Real processes, real PostgreSQL (a fresh schema per test, dropped afterwards); waits are bounded by
the clients' 10 s read timeout and assert behaviour, never speed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from httpx_sse import ServerSentEvent, connect_sse
from psycopg import sql

from agentjournal import Journal
from agentjournal.backends.postgres_write import SETTLED
from agentjournal.keys import ApiKeys
from postgres_fixtures import ADMIN_URL, fresh_schema, require_postgres, url_for

Running = Any  # conftest's RunningServer (fixtures only; nothing is imported from conftest)
TIMEOUT = httpx.Timeout(10.0)  # a stream that stays silent this long fails the test
LEASE = 600.0  # no lease taken here may expire while a test runs
TENANT = "acme"

pytestmark = pytest.mark.slow


# -- helpers ----------------------------------------------------------------------------------


def http(running: Running, key: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=running.base_url, timeout=TIMEOUT, headers=headers)


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def new_session(client: httpx.Client, **body: Any) -> str:
    return str(ok(client.post("/v1/sessions", json=body), 201)["session_id"])


def append(client: httpx.Client, session_id: str, **payload: Any) -> dict[str, Any]:
    body = {"type": "user_message", "payload": payload}
    event: dict[str, Any] = ok(client.post(f"/v1/sessions/{session_id}/events", json=body), 201)
    return event


def events_of(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    page = ok(client.get(f"/v1/sessions/{session_id}/events", params={"limit": 1000}))
    assert page["next_after"] is None
    found: list[dict[str, Any]] = page["events"]
    return found


def next_data(frames: Iterator[ServerSentEvent]) -> ServerSentEvent:
    """The next frame that carries an event (skipping the `retry:` hint); the client's read
    timeout fails the test if none comes."""
    for frame in frames:
        if frame.data:
            return frame
    raise AssertionError("the stream ended")


def wait_until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def listening(channel: str) -> int:
    """How many database sessions LISTEN on `channel` (read as the superuser)."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (sql.SQL("LISTEN {}").format(sql.Identifier(channel)).as_string(conn),),
        ).fetchone()
    return int(row[0]) if row else 0


def verify_clean(url: str) -> None:
    with Journal.open(url) as journal:
        report = journal.for_tenant(TENANT).verify()
    assert report.ok, report.to_dict()
    assert report.events_checked > 0


class Instances:
    """Servers started on one database URL, all stopped before the schema is dropped."""

    def __init__(self, start_server: Any, schema: str) -> None:
        self.start_server = start_server
        self.url = url_for(schema)
        self.channel = f"agentjournal.{schema}"  # the schema's LISTEN/NOTIFY channel
        self.started: list[Running] = []

    def start(self, *, tenants: tuple[str, ...] = (), port: int | None = None) -> Running:
        running = self.start_server(db_path=self.url, tenants=tenants, port=port)
        self.started.append(running)
        return running

    def stop_all(self) -> None:
        for running in self.started:
            running.stop()


@pytest.fixture
def instances(start_server: Any) -> Iterator[Instances]:
    require_postgres()
    with fresh_schema("two") as schema:
        started = Instances(start_server, schema)
        try:
            yield started
        finally:
            started.stop_all()


# -- the tests --------------------------------------------------------------------------------


def test_appends_through_a_stream_live_on_b_and_keys_are_shared(instances: Instances) -> None:
    a = instances.start(tenants=(TENANT,))  # creates the tenant's key in the database first
    b = instances.start()  # creates no key: it requires one only because the database has one
    key = a.keys[TENANT]

    # One key works on both instances; B refuses callers without a valid one.
    assert httpx.get(f"{b.base_url}/v1/sessions", timeout=TIMEOUT).status_code == 401
    with http(b, "aj_" + "a" * 10 + "_" + "b" * 43) as stranger:
        assert stranger.get("/v1/sessions").status_code == 401
    with Journal.open(instances.url) as journal:
        _, later_key = ApiKeys(journal.storage).create(TENANT, "created while both run")
    for running in (a, b):
        for usable in (key, later_key):
            with http(running, usable) as client:
                assert client.get("/v1/sessions").status_code == 200

    # Each instance LISTENs on the schema's channel (that is how B hears of A's commits).
    wait_until(lambda: listening(instances.channel) == 2, "both instances to LISTEN")

    with (
        http(a, key) as via_a,
        http(b, later_key) as via_b,
        psycopg.connect(ADMIN_URL, autocommit=True) as listener,
    ):
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(instances.channel)))
        sid = new_session(via_a, title="two instances")
        session_url = f"/v1/sessions/{sid}/events/stream"
        with (
            connect_sse(via_b, "GET", session_url) as session_source,
            connect_sse(via_b, "GET", "/v1/events/stream") as feed_source,
        ):
            assert session_source.response.status_code == 200
            assert feed_source.response.status_code == 200
            session_frames = session_source.iter_sse()
            feed_frames = feed_source.iter_sse()
            # Both streams are open and past their backlog (session_created) before A appends.
            first = next_data(session_frames)
            assert (first.id, first.event) == ("1", "session_created")
            created = json.loads(next_data(feed_frames).data)
            assert (created["session_id"], created["type"]) == (sid, "session_created")

            acknowledged = [append(via_a, sid, content=f"through A #{n}") for n in range(5)]

            live = [next_data(session_frames) for _ in acknowledged]
            feed = [next_data(feed_frames) for _ in acknowledged]

        # B's session stream: A's events, in seq order, exactly as A acknowledged them.
        assert [f.id for f in live] == ["2", "3", "4", "5", "6"]
        assert [f.event for f in live] == ["user_message"] * 5
        assert [json.loads(f.data) for f in live] == acknowledged
        assert [json.loads(f.data)["payload"]["content"] for f in live] == [
            f"through A #{n}" for n in range(5)
        ]
        # B's global feed: the same events, id = position, ascending as integers.
        fed = [json.loads(f.data) for f in feed]
        assert fed == acknowledged
        ids = [created["position"]] + [f.id for f in feed]
        assert ids == [created["position"]] + [e["position"] for e in fed]
        assert [int(i) for i in ids] == sorted(int(i) for i in ids)
        assert len(set(ids)) == len(ids)
        # What B stores and serves is what A wrote.
        assert events_of(via_b, sid) == events_of(via_a, sid) == [created, *acknowledged]

        # The notifications carry positions of committed events, never an event's body
        # (an empty payload is a spare wake-up, sent by an instance that closes), each maybe
        # marked as shown by the feed at once.
        positions = [e["position"] for e in [created, *acknowledged]]
        payloads: list[str] = []
        for note in listener.notifies(timeout=10.0):
            payloads.append(note.payload.removesuffix(SETTLED))
            if payloads[-1] == positions[-1]:
                break
        assert positions[-1] in payloads
        assert {p for p in payloads if p} <= set(positions), payloads

    instances.stop_all()
    verify_clean(instances.url)


def test_a_task_queued_through_a_is_claimed_through_b_while_a_restarts(
    instances: Instances,
) -> None:
    a = instances.start(tenants=(TENANT,))
    b = instances.start()
    key = a.keys[TENANT]
    task_type = f"job.{secrets.token_hex(4)}"

    with http(a, key) as via_a:
        sid = new_session(via_a, title="restart")
        task = ok(via_a.post(f"/v1/sessions/{sid}/tasks", json={"type": task_type}), 201)
    task_id = task["task_id"]
    assert (task["status"], task["attempt"]) == ("pending", 0)

    # A dies without a chance to clean up anything.
    a.process.kill()
    a.process.wait(timeout=10)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{a.base_url}/healthz", timeout=2.0)

    with http(b, key) as via_b, ThreadPoolExecutor(max_workers=1) as pool:
        # B claims while A is down...
        body = {"worker": "worker-b", "types": [task_type], "lease_seconds": LEASE}
        claimed = ok(via_b.post("/v1/tasks/claim", json=body))
        assert (claimed["task_id"], claimed["status"]) == (task_id, "running")
        assert (claimed["attempt"], claimed["lease_owner"]) == (1, "worker-b")

        # ...and reports progress while A starts again on its port (same key: it is stored).
        restarting = pool.submit(instances.start, port=a.port)
        progress = {"attempt": 1, "progress": 0.5, "message": "half"}
        half = ok(via_b.post(f"/v1/tasks/{task_id}/progress", json=progress))
        assert (half["status"], half["progress"]) == ("running", 0.5)
        a2 = restarting.result(timeout=60)
        assert a2.base_url == a.base_url
        # The killed A's LISTEN session is gone; the restarted A has its own.
        wait_until(lambda: listening(instances.channel) == 2, "A to LISTEN again")

        with http(a2, key) as via_a2:
            # The restarted A sees B's claim and does not hand the task out again.
            seen = ok(via_a2.get(f"/v1/tasks/{task_id}"))
            assert (seen["status"], seen["attempt"], seen["lease_owner"]) == (
                "running",
                1,
                "worker-b",
            )
            assert seen["progress"] == 0.5
            again = {"worker": "worker-a", "types": [task_type], "lease_seconds": LEASE}
            for client in (via_a2, via_b):
                assert client.post("/v1/tasks/claim", json=again).status_code == 204

            # B completes; a stream on the restarted A sees it live.
            last_seq = ok(via_a2.get(f"/v1/sessions/{sid}"))["last_seq"]
            url = f"/v1/sessions/{sid}/events/stream"
            with connect_sse(via_a2, "GET", url, params={"after": last_seq}) as source:
                assert source.response.status_code == 200
                done = {"attempt": 1, "output": {"by": "B"}}
                completed = ok(via_b.post(f"/v1/tasks/{task_id}/complete", json=done))
                frame = next_data(source.iter_sse())
            assert (frame.id, frame.event) == (str(last_seq + 1), "task_completed")
            assert json.loads(frame.data)["payload"]["task_id"] == task_id

            final = ok(via_a2.get(f"/v1/tasks/{task_id}"))
            assert final == completed
            assert (final["status"], final["attempt"], final["output"]) == (
                "completed",
                1,
                {"by": "B"},
            )
            assert (final["retry_count"], final["lease_owner"]) == (0, None)
            types = [e["type"] for e in events_of(via_a2, sid)]
            assert types == [
                "session_created",
                "task_created",
                "task_started",  # once: no double claim
                "task_progress",
                "task_completed",
            ]

    instances.stop_all()
    verify_clean(instances.url)

"""The global feed's promise end to end on PostgreSQL, under the stress writers of
`bench/feed_stress.py` (processes appending, batching, sleeping inside their transactions,
forking, running tasks, importing; the cores kept busy): a reader that resumes after the last
position it saw gets every committed event exactly once, in ascending position order, each
session's events in seq order, across a restart of what it reads from.

- `GET /v1/events/stream` from a real `agentjournal serve`, which is SIGKILLed mid-stream and
  started again on its port; the client reconnects with `Last-Event-ID`.
- `Journal.subscribe_all`, whose journal is closed mid-stream and opened again; the subscriber
  starts again after its last position.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from httpx_sse import connect_sse

from agentjournal import Journal
from postgres_fixtures import ADMIN_URL, fresh_schema, url_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import feed_stress

pytestmark = pytest.mark.slow

TIMEOUT = httpx.Timeout(15.0)  # a stream silent this long while events are owed fails the test


def stored_events(schema: str) -> dict[int, dict[str, Any]]:
    """Every row of the schema's events, read as the superuser: event_id -> its fields."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT event_id, tx::text, session_id, seq FROM {schema}.events"
        ).fetchall()
    return {
        event_id: {"position": str(int(tx) << 64 | event_id), "session_id": sid, "seq": seq}
        for event_id, tx, sid, seq in rows
    }


def assert_the_promise(received: list[dict[str, Any]], stored: dict[int, dict[str, Any]]) -> None:
    ids = [event["event_id"] for event in received]
    assert [i for i, n in Counter(ids).items() if n > 1] == [], "events delivered twice"
    assert set(ids) == set(stored), "events never delivered"
    positions = [int(event["position"]) for event in received]
    assert positions == sorted(positions), "positions not ascending"
    seqs: dict[str, list[int]] = defaultdict(list)
    for event in received:
        assert {k: event[k] for k in ("position", "session_id", "seq")} == stored[event["event_id"]]
        seqs[event["session_id"]].append(event["seq"])
    assert all(found == list(range(1, len(found) + 1)) for found in seqs.values())


SENTINEL = "stress.done"  # appended once the writers are done: its position is after all of theirs


def with_writers(schema: str, read: Callable[[], list[dict[str, Any]]]) -> None:
    """Run the stress writers on `schema` while `read` consumes the feed up to the sentinel,
    which is appended once every writer has exited; then check the promise against every stored
    event (the sentinel's transaction began after every writer's committed, so the feed shows it
    last and a reader that reached it owes nothing)."""
    url = url_for(schema)
    with Journal.open(url) as journal:
        shared = [journal.create_session(f"shared {i}").session_id for i in range(3)]
        with feed_stress.Writers(url, shared, count=5, ops=10, burners=1, seed=11) as writers:
            writers.go()
            errors: list[str] = []

            def finish() -> None:
                errors.extend(writers.finish())
                journal.append(shared[0], SENTINEL, {})

            closer = threading.Thread(target=finish)
            closer.start()
            received = read()
            closer.join()
        assert errors == []
    assert received[-1]["type"] == SENTINEL
    assert_the_promise(received, stored_events(schema))


def test_the_sse_feed_resumes_with_last_event_id_across_a_killed_server(start_server: Any) -> None:
    with fresh_schema("feedsse") as schema:
        server = start_server(db_path=url_for(schema))
        port = server.port

        def read() -> list[dict[str, Any]]:
            nonlocal server
            received: list[dict[str, Any]] = []
            last_id: str | None = None
            with httpx.Client(timeout=TIMEOUT) as client:
                for connection in range(4):
                    headers = {"Last-Event-ID": last_id} if last_id else {}
                    url = f"{server.base_url}/v1/events/stream"
                    try:
                        with connect_sse(client, "GET", url, headers=headers) as source:
                            assert source.response.status_code == 200
                            for frame in source.iter_sse():
                                if not frame.data:
                                    continue  # the retry hint
                                event = json.loads(frame.data)
                                assert frame.id == event["position"]
                                received.append(event)
                                last_id = frame.id
                                if event["type"] == SENTINEL:
                                    assert connection > 0, "the server was never killed"
                                    return received
                                if connection == 0 and len(received) == 200:
                                    server.process.kill()  # SIGKILL, mid-stream
                    except (httpx.RemoteProtocolError, httpx.ReadError):
                        pass  # the server went away under the stream
                    if connection == 0:
                        assert server.process.wait(10) is not None
                        server = start_server(db_path=url_for(schema), port=port)
            raise AssertionError(f"no sentinel after 4 connections ({len(received)} events)")

        with_writers(schema, read)
        server.stop()


def test_subscribe_all_resumes_after_its_last_position_across_a_reopened_journal() -> None:
    with fresh_schema("feedsub") as schema:

        def read() -> list[dict[str, Any]]:
            received: list[dict[str, Any]] = []
            after: str | None = None
            for generation in range(2):
                with Journal.open(url_for(schema)) as journal:
                    for event in journal.subscribe_all(after=after, poll_interval=0.05):
                        received.append(event.to_dict())
                        after = event.position
                        if event.type == SENTINEL:
                            assert generation == 1, "the journal was never reopened"
                            return received
                        if generation == 0 and len(received) == 200:
                            break  # the journal closes; a new one resumes after `after`
            raise AssertionError("the second subscriber ended before the sentinel")

        with_writers(schema, read)

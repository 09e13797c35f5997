"""Server-Sent Events over a real server on loopback: framing, resume after Last-Event-ID while
other clients append, the tenant's global feed, heartbeats, stream slots, deleted sessions."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import psycopg
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from postgres_fixtures import ADMIN_URL, fresh_schema, require_postgres, url_for

Running = Any  # conftest's RunningServer (fixtures only; nothing is imported from conftest)
TIMEOUT = httpx.Timeout(10.0)  # every read of a stream fails the test after 10 s of silence


# -- helpers ----------------------------------------------------------------------------------


def http(running: Running, tenant: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=running.base_url, timeout=TIMEOUT, headers=running.headers(tenant))


def new_session(client: httpx.Client, **body: Any) -> str:
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


def append(
    client: httpx.Client, session_id: str, type_: str = "user_message", **payload: Any
) -> dict[str, Any]:
    body = {"type": type_, "payload": payload or {"content": "x"}}
    response = client.post(f"/v1/sessions/{session_id}/events", json=body)
    assert response.status_code == 201, response.text
    event: dict[str, Any] = response.json()
    return event


def events_of(client: httpx.Client, session_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Every event of the session after `after`, following next_after."""
    out: list[dict[str, Any]] = []
    for _ in range(1000):  # bounded
        response = client.get(
            f"/v1/sessions/{session_id}/events", params={"after": after, "limit": 1000}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        out += page["events"]
        if page["next_after"] is None:
            return out
        after = page["next_after"]
    raise AssertionError("paging did not end")


def frames(
    client: httpx.Client, url: str, *, headers: dict[str, str] | None = None, **params: Any
) -> list[ServerSentEvent]:
    """Every frame of a stream that ends by itself (e.g. ?follow=false)."""
    with connect_sse(client, "GET", url, params=params, headers=headers or {}) as source:
        assert source.response.status_code == 200, source.response.read()
        return list(source.iter_sse())


def data_frames(sse: list[ServerSentEvent]) -> list[ServerSentEvent]:
    """Frames that carry an event (the `retry:` hint carries none)."""
    return [frame for frame in sse if frame.data]


class Writers:
    """Threads that keep appending to sessions (each with its own client) until stopped."""

    def __init__(self, running: Running, targets: list[tuple[str | None, str]], cap: int = 300):
        self.running = running
        self.targets = targets  # (tenant, session_id) per writer
        self.cap = cap
        self.stop = threading.Event()
        self.acknowledged: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i, tenant, sid), daemon=True)
            for i, (tenant, sid) in enumerate(targets)
        ]

    def _run(self, index: int, tenant: str | None, session_id: str) -> None:
        try:
            with http(self.running, tenant) as client:
                for n in range(self.cap):
                    if self.stop.is_set():
                        return
                    event = append(client, session_id, content=f"writer {index} #{n}")
                    with self._lock:
                        self.acknowledged.append(event)
        except BaseException as exc:  # reported by join()
            self.errors.append(exc)

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
            assert not thread.is_alive(), "a writer did not stop"
        assert not self.errors, self.errors

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def last_seq(client: httpx.Client, session_id: str) -> int:
    return int(client.get(f"/v1/sessions/{session_id}").json()["last_seq"])


SENTINEL = "test.sentinel"


# -- framing ----------------------------------------------------------------------------------


def test_frames_are_id_seq_event_type_data_the_event_json(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client, title="frames")
        append(client, sid, content="你好")
        append(client, sid, "assistant_message", content="hi")
        append(client, sid, "myapp.note", n=1)
        url = f"/v1/sessions/{sid}/events/stream"
        with connect_sse(client, "GET", url, params={"follow": "false"}) as source:
            response = source.response
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert "no-cache" in response.headers["cache-control"]
            sse = list(source.iter_sse())
        # The first frame is the reconnection hint.
        assert sse[0].retry is not None
        assert sse[0].retry > 0
        assert sse[0].data == ""
        expected = events_of(client, sid)
        got = data_frames(sse)
        assert [frame.id for frame in got] == [str(e["seq"]) for e in expected]
        assert [frame.event for frame in got] == [e["type"] for e in expected]
        assert [json.loads(frame.data) for frame in got] == expected


def test_follow_false_ends_after_the_backlog_and_after_is_exclusive(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client)
        for i in range(5):
            append(client, sid, content=str(i))
        url = f"/v1/sessions/{sid}/events/stream"
        backlog = data_frames(frames(client, url, follow="false"))
        assert [f.id for f in backlog] == [str(seq) for seq in range(1, 7)]
        after = data_frames(frames(client, url, follow="false", after=3))
        assert [f.id for f in after] == ["4", "5", "6"]
        # Last-Event-ID wins over ?after=, both ways.
        resumed = frames(client, url, headers={"Last-Event-ID": "4"}, follow="false", after=1)
        assert [f.id for f in data_frames(resumed)] == ["5", "6"]
        resumed = frames(client, url, headers={"Last-Event-ID": "1"}, follow="false", after=5)
        assert [f.id for f in data_frames(resumed)] == ["2", "3", "4", "5", "6"]
        assert data_frames(frames(client, url, follow="false", after=6)) == []


def test_a_bad_last_event_id_is_a_problem(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client)
        response = client.get(f"/v1/sessions/{sid}/events/stream", headers={"Last-Event-ID": "abc"})
        assert response.status_code == 422
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["detail"]


def test_an_out_of_range_resume_point_is_a_problem_before_the_stream_starts(
    server: Running,
) -> None:
    """A resume point past 64 bits must be refused with a status, not a 200 stream that breaks."""
    with http(server) as client:
        sid = new_session(client)
        session_url = f"/v1/sessions/{sid}/events/stream"
        attempts: list[tuple[str, dict[str, Any], dict[str, str]]] = [
            (session_url, {"after": 2**63}, {}),
            (session_url, {}, {"Last-Event-ID": "9" * 30}),
            ("/v1/events/stream", {"after": "9" * 30}, {}),
            ("/v1/events/stream", {}, {"Last-Event-ID": "9" * 30}),
        ]
        for url, params, headers in attempts:
            try:
                response = client.get(url, params={**params, "follow": "false"}, headers=headers)
            except httpx.RemoteProtocolError as exc:
                pytest.fail(f"{url} {params} {headers}: the stream started, then broke: {exc}")
            assert response.status_code == 422, (url, params, headers, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["detail"]


# -- the resume test of the issue -------------------------------------------------------------


def test_resume_after_event_4_while_other_clients_append(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client, title="resume")
        url = f"/v1/sessions/{sid}/events/stream"
        with Writers(server, [(None, sid)] * 3) as writers:
            # 1. Read while the writers append; leave right after event 4.
            seen: list[int] = []
            with connect_sse(client, "GET", url) as source:
                assert source.response.status_code == 200
                for frame in source.iter_sse():
                    if frame.data:
                        seen.append(int(frame.id))
                        if frame.id == "4":
                            break
            assert seen == [1, 2, 3, 4]
            # 2. While we are away the others keep appending.
            wait_until(lambda: last_seq(client, sid) >= 4 + 10, "appends while disconnected")

            # 3. Reconnect with Last-Event-ID: 4 (and a stale ?after=1 it must win over).
            received: list[dict[str, Any]] = []
            ids: list[str] = []
            live_mark: int | None = None
            headers = {"Last-Event-ID": "4"}
            with connect_sse(client, "GET", url, params={"after": 1}, headers=headers) as source:
                assert source.response.status_code == 200
                for frame in source.iter_sse():
                    if not frame.data:
                        continue
                    ids.append(frame.id)
                    received.append(json.loads(frame.data))
                    if live_mark is None:
                        # What has committed by now; more must arrive live after it.
                        live_mark = last_seq(client, sid)
                    elif not writers.stop.is_set() and int(frame.id) >= live_mark + 10:
                        writers.join()  # every writer acknowledged its last append
                        append(client, sid, SENTINEL, end=True)
                    if frame.event == SENTINEL:
                        break
            writers.join()

        assert len(ids) == len(set(ids)), "an event arrived twice"
        expected = events_of(client, sid, after=4)
        assert expected[-1]["type"] == SENTINEL
        assert [int(i) for i in ids] == [e["seq"] for e in expected]
        assert received == expected
        # Every acknowledged append was delivered, whoever wrote it.
        delivered = {e["event_id"] for e in received}
        assert {e["event_id"] for e in writers.acknowledged if e["seq"] > 4} <= delivered
        assert len(writers.acknowledged) >= 24  # appends happened before, during and after


# -- the global feed --------------------------------------------------------------------------


def test_global_feed_ids_are_positions_and_it_is_tenant_scoped(keyed_server: Running) -> None:
    with http(keyed_server, "acme") as acme, http(keyed_server, "beta") as beta:
        ours = [new_session(acme, title="feed-a1"), new_session(acme, title="feed-a2")]
        theirs = new_session(beta, title="feed-b")
        for i in range(3):
            append(acme, ours[i % 2], content=f"a{i}")
            append(beta, theirs, content=f"b{i}")
        sse = data_frames(frames(acme, "/v1/events/stream", follow="false"))
        feed = [json.loads(f.data) for f in sse]
        assert [f.id for f in sse] == [e["position"] for e in feed]
        assert [f.event for f in sse] == [e["type"] for e in feed]
        assert {e["session_id"] for e in feed} == set(ours)
        # Commit order; every acme event once, exactly as GET …/events returns it.
        assert [int(e["position"]) for e in feed] == sorted(int(e["position"]) for e in feed)
        expected = sorted(
            (e for sid in ours for e in events_of(acme, sid)), key=lambda e: e["event_id"]
        )
        assert feed == expected
        beta_feed = [
            json.loads(f.data)
            for f in data_frames(frames(beta, "/v1/events/stream", follow="false"))
        ]
        assert {e["session_id"] for e in beta_feed} == {theirs}


def test_global_feed_resumes_after_last_event_id_while_others_append(
    keyed_server: Running,
) -> None:
    with http(keyed_server, "acme") as acme, http(keyed_server, "beta") as beta:
        sid = new_session(acme, title="feed-resume")
        other = new_session(beta, title="feed-resume-beta")
        backlog = data_frames(frames(acme, "/v1/events/stream", follow="false"))
        start = backlog[-1].id  # resume from the end of what exists now
        with Writers(keyed_server, [("acme", sid), ("acme", sid), ("beta", other)]) as writers:
            seen: list[str] = []
            with connect_sse(acme, "GET", "/v1/events/stream", params={"after": start}) as source:
                for frame in source.iter_sse():
                    if frame.data:
                        seen.append(frame.id)
                        if len(seen) == 4:
                            break
            fourth = seen[-1]
            wait_until(lambda: last_seq(acme, sid) >= 4 + 10, "appends while disconnected")
            ids: list[str] = []
            received: list[dict[str, Any]] = []
            headers = {"Last-Event-ID": fourth}
            params = {"after": start}  # Last-Event-ID wins over it
            with connect_sse(
                acme, "GET", "/v1/events/stream", params=params, headers=headers
            ) as source:
                for frame in source.iter_sse():
                    if not frame.data:
                        continue
                    ids.append(frame.id)
                    received.append(json.loads(frame.data))
                    if len(received) == 10:
                        writers.join()
                        append(acme, sid, SENTINEL, end=True)
                    if frame.event == SENTINEL:
                        break
            writers.join()
        assert len(ids) == len(set(ids)), "an event arrived twice"
        assert [int(i) for i in ids] == sorted(int(i) for i in ids)
        assert int(ids[0]) > int(fourth)
        assert [e["position"] for e in received] == ids
        assert {e["session_id"] for e in received} == {sid}, "another tenant's event leaked"
        # Exactly what the backlog after that position holds now.
        after_fourth = data_frames(
            frames(acme, "/v1/events/stream", headers={"Last-Event-ID": fourth}, follow="false")
        )
        assert [json.loads(f.data) for f in after_fourth] == received
        acme_acked = {e["event_id"] for e in writers.acknowledged if e["session_id"] == sid}
        assert {e["event_id"] for e in received} >= {i for i in acme_acked if i > int(fourth)}


# -- liveness ---------------------------------------------------------------------------------


def test_an_idle_stream_stays_open_and_delivers_a_later_event(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client)
        url = f"/v1/sessions/{sid}/events/stream"
        timer = threading.Timer(1.0, lambda: append(client, sid, SENTINEL, late=True))
        with connect_sse(client, "GET", url) as source:
            got: list[ServerSentEvent] = []
            for frame in source.iter_sse():
                if frame.data:
                    got.append(frame)
                    if frame.id == "1":
                        timer.start()  # idle ~1 s, then an append
                    if frame.event == SENTINEL:
                        break
        timer.join(timeout=10)
        assert [f.id for f in got] == ["1", "2"]
        assert json.loads(got[1].data)["payload"] == {"late": True}


def test_heartbeats_keep_an_idle_stream_alive(start_server: Callable[..., Running]) -> None:
    """`serve` has no heartbeat flag, so this server runs the app with Limits(heartbeat 0.2 s)."""
    beating = start_server(limits={"heartbeat_seconds": 0.2})
    with http(beating) as client:
        sid = new_session(client)
        comments = 0
        with client.stream("GET", f"/v1/sessions/{sid}/events/stream") as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith(":"):
                    comments += 1
                    if comments == 3:
                        break
        assert comments == 3  # three heartbeats on a stream with nothing to say


def test_a_client_that_leaves_frees_its_stream_slot(start_server: Callable[..., Running]) -> None:
    capped = start_server("--max-streams-per-key", "2")
    with http(capped) as client:
        sid = new_session(client)
        url = f"/v1/sessions/{sid}/events/stream"

        def open_streams() -> float:
            text = client.get("/metrics").text
            line = next(
                ln for ln in text.splitlines() if ln.startswith("agentjournal_open_streams ")
            )
            return float(line.split()[1])

        def accepted() -> bool:
            with client.stream("GET", url) as response:
                return response.status_code == 200

        for _ in range(3):
            with ExitStack() as stack:
                lines = []
                for _ in range(2):
                    response = stack.enter_context(client.stream("GET", url))
                    assert response.status_code == 200
                    lines.append(response.iter_lines())
                    assert next(lines[-1]).startswith("retry:")
                assert open_streams() == 2
                assert client.get(url).status_code == 429  # full while both are open
            # Both clients left: the slots come back within a bounded wait.
            wait_until(lambda: open_streams() == 0, "the slots of closed streams")
            wait_until(accepted, "a new stream to be accepted")
            wait_until(lambda: open_streams() == 0, "the slot of the accepted stream")
        # A stream that ends by itself (follow=false) also gives its slot back.
        for _ in range(3):
            assert data_frames(frames(client, url, follow="false"))
        wait_until(lambda: open_streams() == 0, "the slots of finished streams")


def test_the_stream_of_a_deleted_session_ends_after_the_delete_event(server: Running) -> None:
    with http(server) as client:
        sid = new_session(client)
        append(client, sid, content="before")
        url = f"/v1/sessions/{sid}/events/stream"
        got: list[ServerSentEvent] = []
        with connect_sse(client, "GET", url) as source:
            for frame in source.iter_sse():  # ends by itself, or the 10 s read timeout fails
                if frame.data:
                    got.append(frame)
                    if frame.id == "2":
                        assert client.delete(f"/v1/sessions/{sid}").status_code == 200
        assert [f.id for f in got] == ["1", "2", "3"]
        last = json.loads(got[-1].data)
        assert last["type"] == "session_updated"
        assert last["payload"]["status"] == "deleted"


def test_a_stream_of_another_tenants_session_is_404(keyed_server: Running) -> None:
    with http(keyed_server, "acme") as acme, http(keyed_server, "beta") as beta:
        sid = new_session(acme)
        response = beta.get(f"/v1/sessions/{sid}/events/stream")
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("application/problem+json")
        missing = beta.get("/v1/sessions/no-such-session/events/stream")
        assert missing.json()["detail"].replace("no-such-session", sid) == response.json()["detail"]


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for thread in left:
        thread.join(timeout=10)
    assert not [t for t in left if t.is_alive()], "a test left a thread running"


def test_a_feed_that_ends_waits_for_what_an_older_transaction_holds_back(
    start_server: Callable[..., Running],
) -> None:
    """On PostgreSQL the feed shows an event only once every older transaction in the cluster has
    ended. `follow=false` promises the events committed before the request, so it waits for
    them instead of ending short (other jobs on the same cluster once made a test see half)."""
    require_postgres()
    with fresh_schema("held") as schema:
        running = start_server(db_path=url_for(schema))
        with http(running) as client, psycopg.connect(ADMIN_URL) as other:
            session_id = new_session(client, title="held back")
            other.execute("SELECT pg_current_xact_id()")  # an id, and the transaction stays open
            sent = [append(client, session_id, content=str(n))["seq"] for n in range(3)]
            ender = threading.Timer(0.5, other.commit)
            ender.start()
            try:
                feed = data_frames(frames(client, "/v1/events/stream", follow="false"))
            finally:
                ender.join()
            running.stop()
    got = [json.loads(frame.data) for frame in feed]
    assert [(e["session_id"], e["seq"]) for e in got] == [(session_id, s) for s in [1, *sent]]


BURST = 40
LIMIT = 3


async def _open_at_once(base_url: str, urls: list[str]) -> list[int]:
    """Open every stream at the same moment and hold all of them open until every one has its
    status: the statuses, in order."""
    limits = httpx.Limits(max_connections=len(urls), max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30.0, limits=limits) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        opened = await asyncio.gather(
            *(stack.enter_async_context(client.stream("GET", url)) for url in urls)
        )
        return [response.status_code for response in opened]


def test_a_burst_of_simultaneous_opens_admits_exactly_the_limit(
    start_server: Callable[..., Running],
) -> None:
    capped = start_server(limits={"max_streams_per_key": LIMIT})
    with http(capped) as client:
        sid = new_session(client)
    # Session streams and the feed share the key's slots.
    urls = [f"/v1/sessions/{sid}/events/stream"] * (BURST // 2) + ["/v1/events/stream"] * (
        BURST // 2
    )
    statuses = asyncio.run(_open_at_once(capped.base_url, urls))
    assert sorted(statuses) == [200] * LIMIT + [429] * (BURST - LIMIT)


def test_a_slot_comes_back_when_the_response_never_starts(tmp_path: Any) -> None:
    """In process: a client that is gone before the first byte is sent (its `send` fails) must
    not keep the slot it was admitted with, though the stream's generator never ran."""
    from agentjournal import Journal
    from agentjournal.server import Limits, create_app

    with Journal.open(tmp_path / "j.db") as journal:
        app = create_app(journal, limits=Limits(max_streams_per_key=1))
        sid = journal.create_session("t").session_id
        path = f"/v1/sessions/{sid}/events/stream"

        async def gone_client() -> None:
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "GET",
                "scheme": "http",
                "path": path,
                "raw_path": path.encode(),
                "root_path": "",
                "query_string": b"",
                "headers": [],
                "client": ("127.0.0.1", 40000),
                "server": ("127.0.0.1", 8000),
            }

            async def receive() -> dict[str, Any]:
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                raise OSError("the client is gone")

            with contextlib.suppress(OSError, ExceptionGroup):
                await app(scope, receive, send)

        async def then_a_stream() -> int:
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40001))
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                response = await client.get(path, params={"follow": "false"})
                return response.status_code

        service = app.state.service

        async def both() -> int:
            try:
                await gone_client()
                return await then_a_stream()
            finally:
                await service.journal.close()  # what the app's lifespan does at shutdown

        assert asyncio.run(both()) == 200
        assert service.metrics.registry.get_sample_value("agentjournal_open_streams") == 0

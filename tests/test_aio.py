"""`AsyncJournal`: the same verbs as `Journal`, awaitable. Each test runs its own event loop with
`asyncio.run`; every wait is bounded by `asyncio.wait_for(..., WAIT)`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from agentjournal import (
    AsyncJournal,
    Conflict,
    ContextTooLarge,
    Event,
    InvalidArgument,
    InvalidEvent,
    Journal,
    NewEvent,
    PayloadTooLarge,
    SessionClosed,
    SessionNotFound,
    UnknownToolCall,
)
from agentjournal.live import PAGE_SIZE
from expected import settled_feed

WAIT = 30.0
NO_POLL = 2 * WAIT  # longer than any wait: live events must arrive by wake-up, not by polling
NOTIFIED = 10.0  # seconds a notified subscriber may take, far below its poll interval
LONG_POLL = 3 * NOTIFIED  # a poll this rare never comes within NOTIFIED: only a wake-up can
T = TypeVar("T")


def run(url: str, body: Callable[[AsyncJournal], Coroutine[Any, Any, T]]) -> T:
    """Open an AsyncJournal on `url`, run body in a fresh event loop with a time limit."""

    async def main() -> T:
        async with await AsyncJournal.open(url) as journal:
            return await asyncio.wait_for(body(journal), WAIT)

    return asyncio.run(main())


def test_verbs_match_the_sync_journal(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        session = await aj.create_session(
            "订单客服", system_prompt="你是订单客服助手。", metadata={"agent": "orders"}
        )
        sid = session.session_id
        assert aj.tenant == "default"
        assert await aj.get_session(sid) == session
        user = await aj.append(sid, "user_message", {"content": "帮我查一下订单数量"})
        batch = await aj.append_many(
            sid,
            [
                NewEvent("tool_call", {"call_id": "c1", "name": "count", "arguments": "{}"}),
                {"type": "tool_result", "payload": {"call_id": "c1", "content": "42"}},
                NewEvent("assistant_message", {"content": "你当前有 42 个订单。"}),
            ],
        )
        assert [user.seq, *(e.seq for e in batch)] == [2, 3, 4, 5]

        sync = aj.journal
        events = await aj.events(sid)
        assert events == sync.events(sid)
        assert [e.seq for e in events] == [1, 2, 3, 4, 5]
        assert await aj.events(sid, after=2, limit=2) == events[2:4]
        settled_feed(sync)  # what follows reads the feed as it is then: see settled_feed
        assert await aj.events_all(after=events[1].position) == events[2:]
        assert await aj.messages(sid) == sync.messages(sid)
        assert [m.content for m in await aj.messages(sid, last=1)] == ["你当前有 42 个订单。"]
        assert await aj.tool_calls(sid) == sync.tool_calls(sid)

        replayed = await aj.replay(sid)
        assert replayed == sync.replay(sid)
        assert isinstance(replayed, list)
        assert replayed[0] == {"role": "system", "content": "你是订单客服助手。"}
        assert replayed[-1] == {"role": "assistant", "content": "你当前有 42 个订单。"}
        assert await aj.replay(sid, until=2) == sync.replay(sid, until=2)
        assert await aj.replay(sid, format="anthropic") == sync.replay(sid, format="anthropic")
        assert await aj.context(sid, max_tokens=1000) == sync.context(sid, max_tokens=1000)

        fork = await aj.fork(sid, 2, title="branch")
        assert fork.forked_from == sid
        assert await aj.replay(fork.session_id) == sync.replay(sid, until=2)
        compacted = await aj.compact(sid, 4, "用户问了订单数量")
        assert (compacted.type, compacted.seq) == ("context_compacted", 6)

        updated = await aj.update_session(sid, title="orders")
        assert updated.title == "orders"
        listed = await aj.sessions()
        assert {s.session_id for s in listed} == {sid, fork.session_id}
        deleted = await aj.delete_session(fork.session_id)
        assert deleted.status == "deleted"
        assert [s.session_id for s in await aj.sessions()] == [sid]

        report = await aj.verify()
        assert report.ok, report.to_dict()
        assert report.events_checked == len(sync.events(sid)) + len(sync.events(fork.session_id))
        assert (await aj.verify(rebuild=True)).rebuilt == []
        fork_events = await aj.events(fork.session_id)
        assert [e.seq for e in fork_events[:2]] == [1, 2]
        assert await aj.purge_session(fork.session_id) == len(fork_events)
        with pytest.raises(SessionNotFound):
            await aj.get_session(fork.session_id)

    run(journal_url, body)
    with Journal.open(journal_url) as reopened:  # what the async verbs wrote is durable and whole
        assert reopened.verify().ok
        assert [e.seq for e in settled_feed(reopened)] == [1, 2, 3, 4, 5, 6, 7]


def test_fifty_concurrent_appends_are_gapless(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> list[Event]:
        sid = (await aj.create_session("burst")).session_id
        stored = await asyncio.gather(
            *(aj.append(sid, "user_message", {"content": f"m{n}", "n": n}) for n in range(50))
        )
        assert sorted(e.seq for e in stored) == list(range(2, 52))
        assert len({e.event_id for e in stored}) == 50
        events = await aj.events(sid, after=1)
        assert sorted(events, key=lambda e: e.payload["n"]) == sorted(
            stored, key=lambda e: e.payload["n"]
        )
        assert (await aj.verify()).ok
        return events

    events = run(journal_url, body)
    assert [e.seq for e in events] == list(range(2, 52))


def test_concurrent_expected_seq_has_one_winner(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        sid = (await aj.create_session("race")).session_id
        results = await asyncio.gather(
            *(
                aj.append(sid, "user_message", {"content": str(n)}, expected_seq=1)
                for n in range(16)
            ),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, Event)]
        assert len(winners) == 1
        assert all(type(r) is Conflict for r in results if not isinstance(r, Event))
        assert await aj.events(sid, after=1) == winners

    run(journal_url, body)


def test_async_for_yields_backlog_then_live_events(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        sid = (await aj.create_session("live")).session_id
        for n in range(3):
            await aj.append(sid, "user_message", {"content": f"old {n}"})
        seen: list[Event] = []
        backlog_read = asyncio.Event()

        async def follow() -> None:
            async for event in aj.subscribe(sid, poll_interval=NO_POLL):
                seen.append(event)
                if len(seen) == 4:
                    backlog_read.set()
                if event.type == "test.stop":
                    return

        async def produce(name: str) -> None:
            await backlog_read.wait()
            for n in range(10):
                await aj.append(sid, "user_message", {"content": f"{name} {n}"})

        follower = asyncio.create_task(follow())
        await asyncio.gather(produce("a"), produce("b"), produce("c"))
        await aj.append(sid, "test.stop", {})
        await follower
        assert seen == await aj.events(sid)
        assert [e.seq for e in seen] == list(range(1, 1 + 3 + 30 + 1 + 1))

        # Resuming after a seq, and the global feed, from another coroutine.
        resumed = []
        async for event in aj.subscribe(sid, after=30, poll_interval=NO_POLL):
            resumed.append(event)
            if event.type == "test.stop":
                break
        assert resumed == seen[30:]
        feed = []
        async for event in aj.subscribe_all(after=seen[-3].position, poll_interval=NO_POLL):
            feed.append(event)
            if event.type == "test.stop":
                break
        assert feed == seen[-2:]

    run(journal_url, body)


def test_async_subscribe_all_wakes_on_commit_and_ends_with_delete(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        a = (await aj.create_session("a")).session_id
        b = (await aj.create_session("b")).session_id
        start = (await aj.get_session(b)).last_position
        feed: list[Event] = []
        ended = False

        async def follow_all() -> None:
            async for event in aj.subscribe_all(after=start, poll_interval=NO_POLL):
                feed.append(event)
                if event.type == "test.stop":
                    return

        async def follow_a() -> list[Event]:
            events = [event async for event in aj.subscribe(a, poll_interval=NO_POLL)]
            nonlocal ended
            ended = True
            return events

        everything = asyncio.create_task(follow_all())
        only_a = asyncio.create_task(follow_a())
        await asyncio.sleep(0)
        await asyncio.gather(
            *(aj.append(sid, "test.note", {"n": n}) for n in range(10) for sid in (a, b))
        )
        await aj.delete_session(a)
        await aj.append(b, "test.stop", {})
        await everything
        a_events = await only_a
        assert ended
        assert a_events == await aj.events(a)
        assert a_events[-1].payload == {"status": "deleted"}
        assert feed == await aj.events_all(after=start)

    run(journal_url, body)


def test_async_streams_read_on_across_pages(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        # The deletion ends a full page: the session's stream ends on it, not on a short page.
        sid = (await aj.create_session("pages")).session_id
        remaining = 2 * PAGE_SIZE - 2  # between session_created and the deletion
        while remaining:
            batch = min(remaining, 100)
            await aj.append_many(sid, [{"type": "test.note"} for _ in range(batch)])
            remaining -= batch
        await aj.delete_session(sid)
        stored = await aj.events(sid, limit=2 * PAGE_SIZE + 1)
        assert len(stored) == 2 * PAGE_SIZE
        assert [e async for e in aj.subscribe(sid, poll_interval=NO_POLL)] == stored
        resumed = [e async for e in aj.subscribe(sid, after=PAGE_SIZE, poll_interval=NO_POLL)]
        assert resumed == stored[PAGE_SIZE:]

        whole = settled_feed(aj.journal)
        feed: list[Event] = []
        async for event in aj.subscribe_all(poll_interval=NO_POLL):
            feed.append(event)
            if len(feed) == len(whole):
                break
        assert feed == whole

    run(journal_url, body)


def test_async_subscribers_wake_on_another_instances_commit(backend: str, journal_url: str) -> None:
    """Two `AsyncJournal`s on one PostgreSQL schema, as two servers would be: the subscribers
    of one poll every LONG_POLL seconds, so only the other's NOTIFY can bring them each event
    within NOTIFIED. The reading instance never writes."""
    if backend != "postgres":
        pytest.skip(
            "SQLite has no wake-up across connections: other processes' commits are found by"
            " polling (test_subscribe.py)"
        )

    async def main() -> None:
        async with (
            await AsyncJournal.open(journal_url) as reader,
            await AsyncJournal.open(journal_url) as writer,
        ):
            sid = (await writer.create_session("elsewhere")).session_id
            start = (await reader.get_session(sid)).last_position
            session_feed: asyncio.Queue[Event] = asyncio.Queue()
            global_feed: asyncio.Queue[Event] = asyncio.Queue()

            async def follow(stream: AsyncIterator[Event], into: asyncio.Queue[Event]) -> None:
                async for event in stream:
                    await into.put(event)

            followers = [
                asyncio.create_task(
                    follow(reader.subscribe(sid, poll_interval=LONG_POLL), session_feed)
                ),
                asyncio.create_task(
                    follow(reader.subscribe_all(after=start, poll_interval=LONG_POLL), global_feed)
                ),
            ]
            try:
                created = await asyncio.wait_for(session_feed.get(), NOTIFIED)
                assert created.type == "session_created"
                for n in range(5):
                    await asyncio.sleep(0.1)  # let both go back to waiting for a wake-up
                    sent = await writer.append(sid, "user_message", {"content": f"afar {n}"})
                    assert await asyncio.wait_for(session_feed.get(), NOTIFIED) == sent
                    assert await asyncio.wait_for(global_feed.get(), NOTIFIED) == sent
            finally:
                for follower in followers:
                    follower.cancel()
                await asyncio.gather(*followers, return_exceptions=True)

    asyncio.run(main())


def test_errors_keep_their_types(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        sid = (await aj.create_session("errors")).session_id
        await aj.append(sid, "user_message", {"content": "long " * 1000})
        await aj.append(sid, "tool_call", {"call_id": "c1", "name": "f", "arguments": "{}"})
        cases: list[tuple[Callable[[], Awaitable[object]], type[Exception]]] = [
            (lambda: aj.get_session("sess_missing"), SessionNotFound),
            (lambda: aj.append("sess_missing", "user_message", {"content": ""}), SessionNotFound),
            (lambda: aj.append(sid, "user_message", {"content": ""}, expected_seq=1), Conflict),
            (
                lambda: aj.append(sid, "tool_result", {"call_id": "x", "content": ""}),
                UnknownToolCall,
            ),
            (
                lambda: aj.append(
                    sid, "tool_call", {"call_id": "c1", "name": "f", "arguments": ""}
                ),
                Conflict,
            ),
            (lambda: aj.append(sid, "session_created", {"title": "x"}), InvalidEvent),
            (lambda: aj.append(sid, "user_message", {"content": 1}), InvalidEvent),
            (lambda: aj.append_many(sid, []), InvalidEvent),
            (lambda: aj.append(sid, "test.big", {"blob": "x" * (1024 * 1024)}), PayloadTooLarge),
            (lambda: aj.events(sid, limit=0), InvalidArgument),
            (lambda: aj.context(sid, max_tokens=1), ContextTooLarge),
            (lambda: aj.fork(sid, 99), InvalidArgument),
            (lambda: aj.fork(sid, 3), Conflict),  # would leave call c1 without its result
        ]
        for call, error in cases:
            with pytest.raises(error):
                await call()
        stream = aj.subscribe("sess_missing")
        with pytest.raises(SessionNotFound):
            await anext(stream)

        await aj.delete_session(sid)
        with pytest.raises(SessionClosed):
            await aj.append(sid, "user_message", {"content": "late"})
        # Nothing rejected was written: created, user message, tool_call, deleted.
        assert [e.seq for e in await aj.events(sid)] == [1, 2, 3, 4]
        assert (await aj.verify()).ok

    run(journal_url, body)


def test_a_subscriber_on_a_closed_loop_does_not_fail_writers(journal_url: str) -> None:
    """An application closes its event loop while a subscription waits on it (without cancelling
    it). The next append commits, so it must also return: raising would report a committed event
    as failed, and a retry would store it twice."""
    loop = asyncio.new_event_loop()
    try:
        aj = loop.run_until_complete(AsyncJournal.open(journal_url))
        sid = loop.run_until_complete(aj.create_session("abandoned")).session_id
        first = asyncio.Event()
        stream = aj.subscribe(sid, poll_interval=NO_POLL)

        async def follow() -> None:
            async for _ in stream:
                first.set()

        task = loop.create_task(follow())
        # After its first event the follower waits for the next commit, on this loop.
        loop.run_until_complete(asyncio.wait_for(first.wait(), WAIT))
    finally:
        loop.close()
    try:
        event = aj.journal.append(sid, "user_message", {"content": "after the loop closed"})
        assert event.seq == 2
        assert [e.seq for e in aj.journal.events(sid)] == [1, 2]
    finally:
        # The abandoned task can never run again: finish its coroutine so nothing leaks, and
        # spare the log the "Task was destroyed but it is pending" this test causes on purpose.
        task.get_coro().close()
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        asyncio.run(aj.close())


def test_every_public_verb_of_journal_has_an_async_twin() -> None:
    import inspect
    import re

    from agentjournal.aio_verbs import AsyncVerbs

    # hold_turn is a sync context manager for the (sync) runtime's threads; prepare_batch does
    # no I/O. for_tenant makes a view and describe reads a URL, without I/O: sync in both.
    sync_only = {"prepare_batch", "hold_turn"}
    sync_in_both = {"for_tenant", "describe"}
    # dir() walks the bases too: the task verbs are inherited, and need their twins as much.
    verbs = {
        name
        for name in dir(Journal)
        if not name.startswith("_") and callable(getattr(Journal, name)) and name not in sync_only
    }
    assert {"append", "create_task", "recover", "subscribe"} <= verbs
    missing = sorted(v for v in verbs if not hasattr(AsyncJournal, v))
    assert not missing, f"AsyncJournal lacks {missing}"
    for name in sorted(verbs):
        sync, twin = getattr(Journal, name), getattr(AsyncJournal, name)
        sync_signature, twin_signature = inspect.signature(sync), inspect.signature(twin)
        # Parameters compare by name, kind, default and annotation.
        assert twin_signature.parameters == sync_signature.parameters, name
        # Both modules postpone annotations: a return annotation is the source text.
        returns = re.sub(r"\bJournal\b", "AsyncJournal", sync_signature.return_annotation)
        if name in sync_in_both:
            assert not inspect.iscoroutinefunction(twin), name
            assert twin_signature.return_annotation == returns, name
        elif inspect.isasyncgenfunction(twin):
            assert sync_signature.return_annotation.startswith("Iterator["), name
            assert twin_signature.return_annotation == f"Async{returns}", name
        else:
            # `async def f() -> T` is awaited for a T: the annotation stays the sync one's.
            assert inspect.iscoroutinefunction(twin), name
            assert twin_signature.return_annotation == returns, name
        if name in vars(AsyncVerbs):
            assert twin.__doc__ == sync.__doc__, name


def test_a_call_cancelled_before_it_started_never_runs(journal_url: str) -> None:
    """Cancelling a verb's await while the call waits for a worker thread: it never runs (here
    the append is not written), even when a worker frees up right after the cancel (the cancel
    is seen at once, not a loop turn later); a call not cancelled returns its result."""

    async def main() -> None:
        journal = Journal.open(journal_url)
        aj = AsyncJournal(journal, executor=ThreadPoolExecutor(1))  # one worker: calls queue
        try:
            sid = (await aj.create_session("cancelled")).session_id
            gate = threading.Event()
            busy = asyncio.ensure_future(aj._run(gate.wait))  # holds the only worker
            append = asyncio.ensure_future(aj.append(sid, "user_message", {"content": "no"}))
            await asyncio.sleep(0)  # both are submitted; the append waits behind the gate
            append.cancel()
            gate.set()
            assert await busy is True
            with pytest.raises(asyncio.CancelledError):
                await append
            kept = await aj.append(sid, "user_message", {"content": "yes"})
            messages = [e for e in await aj.events(sid) if e.type == "user_message"]
            assert messages == [kept]
        finally:
            await aj.close()
            aj._pool.shutdown(wait=True)

    asyncio.run(main())

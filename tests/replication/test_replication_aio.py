"""`agentjournal.aio.replicate`: the replicator for asyncio code. It catches up or follows on a
thread of its own while the event loop goes on, calls back in the loop, stops between batches
when its task is cancelled (or when `stop` is set), and the target holds every event once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

from agentjournal import AsyncJournal, Journal, NewEvent, ReplicationReport
from agentjournal.aio import replicate
from agentjournal.replication import BatchReport
from bench_runs import bench_module
from postgres_fixtures import fresh_schema, url_for

WAIT = 60.0  # a bound on every wait, never reached when the test passes


def soak() -> ModuleType:
    return bench_module("replication_soak.py")


@pytest.fixture(params=["sqlite", "postgres"])
def target_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with ExitStack() as stack:
        if request.param == "sqlite":
            yield str(tmp_path / "central.db")
        else:
            yield url_for(stack.enter_context(fresh_schema("aio")))


def replicator_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("agentjournal-replicate")]


def test_catch_up_applies_every_event_once_and_calls_back_in_the_loop(
    tmp_path: Path, target_url: str
) -> None:
    edge = tmp_path / "edge.db"
    with Journal.open(edge) as source:
        for n in range(5):
            sid = source.create_session(f"s{n}").session_id
            source.append_many(
                sid, [NewEvent("user_message", {"content": f"{n}/{i}"}) for i in range(6)]
            )
    loop_threads: set[str] = set()
    batches: list[BatchReport] = []

    def on_batch(batch: BatchReport) -> None:
        loop_threads.add(threading.current_thread().name)
        batches.append(batch)

    async def main() -> tuple[ReplicationReport, ReplicationReport]:
        async with await AsyncJournal.open(target_url, tenant="laptop-7") as target:
            first = await asyncio.wait_for(
                replicate(edge, target, batch_size=4, on_batch=on_batch), WAIT
            )
            again = await asyncio.wait_for(replicate(edge, target), WAIT)
            return first, again

    first, again = asyncio.run(main())

    assert (first.events_read, first.appended, first.tenant) == (35, 35, "laptop-7")
    # Batches of 4, growing while behind (as the sync replicator's): every event in one of them.
    assert batches[0].events_read == 4
    assert all(b.events_read >= 4 for b in batches[:-1])
    assert sum(b.events_read for b in batches) == 35
    assert loop_threads == {threading.main_thread().name}
    assert again.events_read == 0
    with Journal.open(edge) as source, Journal.open(target_url, tenant="laptop-7") as target:
        assert soak().check(source, target, set()) == []
    assert replicator_threads() == []


def test_following_then_cancelled_stops_between_batches_and_the_next_call_resumes(
    tmp_path: Path, target_url: str
) -> None:
    checks = soak()
    with Journal.open(tmp_path / "edge.db") as source:
        writer = checks.Writer(source, seed=3)
        applied: list[int] = []

        async def main() -> None:
            async with await AsyncJournal.open(target_url) as target:
                follower = asyncio.create_task(
                    replicate(
                        source,
                        target,
                        follow=True,
                        batch_size=5,
                        poll_interval=0.02,
                        on_batch=lambda b: applied.append(b.appended),
                    )
                )
                writer.start()
                async with asyncio.timeout(WAIT):
                    # The loop goes on while the follower applies batches.
                    while len(applied) < 20:
                        await asyncio.sleep(0.01)
                follower.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(follower, WAIT)
                # Cancelled means stopped: its thread has ended, nothing more is applied.
                assert replicator_threads() == []
                seen = len(applied)
                await asyncio.sleep(0.2)
                assert len(applied) == seen
                writer.stop.set()
                await asyncio.to_thread(writer.join)
                await asyncio.wait_for(replicate(source, target), WAIT)

        asyncio.run(main())
        assert writer.failure is None
        with Journal.open(target_url) as target:
            assert checks.check(source, target, writer.purged) == []


def test_following_returns_its_report_once_stop_is_set(tmp_path: Path) -> None:
    async def main() -> ReplicationReport:
        async with (
            await AsyncJournal.open(tmp_path / "edge.db") as source,
            await AsyncJournal.open(tmp_path / "central.db") as target,
        ):
            sid = (await source.create_session("live")).session_id
            stop = asyncio.Event()
            seen: list[str] = []
            follower = asyncio.create_task(
                replicate(
                    source,
                    target,
                    follow=True,
                    stop=stop,
                    on_batch=lambda b: seen.append(b.position),
                )
            )
            async with asyncio.timeout(WAIT):
                while not seen:  # the session's first batch
                    await asyncio.sleep(0.01)
                for n in range(3):
                    await source.append(sid, "user_message", {"content": f"live {n}"})
                    while (await target.get_session(sid)).last_seq < n + 2:
                        await asyncio.sleep(0.01)
                stop.set()
                return await follower

    report = asyncio.run(main())
    assert report.events_read == 4
    assert report.appended == 4
    assert replicator_threads() == []


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    from agentjournal import InvalidArgument

    with Journal.open(tmp_path / "edge.db") as source:
        source.create_session("one")

    async def main() -> None:
        with pytest.raises(InvalidArgument, match="batch_size"):
            await replicate(tmp_path / "edge.db", tmp_path / "central.db", batch_size=0)

    asyncio.run(main())
    assert not (tmp_path / "central.db").exists()

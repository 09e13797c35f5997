"""`JournalSessionService` (agentjournal as Google ADK's session service) beside ADK's own
`DatabaseSessionService` on SQLite (`sqlite+aiosqlite`), on the same machine in the same run.

    .venv/bin/python bench/adk_bench.py            # the full run (1k, 10k, 100k)
    .venv/bin/python bench/adk_bench.py --quick    # a smoke run (100, 1k)

Three measures, each service in a database of its own under a temporary directory (`--dir`):

- `append_event`: one session, read once, then `--appends` events appended one after the other
  through that session object (what a `Runner` does), a state delta on every fourth; the median
  time per append. Then again with every event changing the session's, the app's and the user's
  state (each service writes all three in one transaction). `JournalSessionService` at the
  journal's default `durability="full"`, `DatabaseSessionService` as it comes (SQLite's
  defaults: rollback journal, synchronous FULL).
- `get_session`, latest 20 events (`GetSessionConfig(num_recent_events=20)`), of a session of N
  events: median of 21 calls after one untimed call that checks it returns 20.
- `list_sessions` of one user (10 sessions) among N sessions (10 per user), and of the whole app
  at the two smaller sizes: median of 7 calls (of 3 for the whole app).

The sessions and events the reads find are written in bulk, not through the services (a 100,000-
event session through `append_event` takes minutes): for the journal with `append_many` of the
batches `JournalSessionService` itself writes (`adk_events.event_batch`), at `durability="normal"`,
then reopened at "full"; for `DatabaseSessionService` with inserts of its own ORM rows
(`StorageSession`, `StorageEvent.from_event`) into the tables it created. Ratio = the ADK service's
time / the journal's (above 1: the journal is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.schemas.v1 import StorageEvent, StorageSession, StorageUserState
from google.genai import types
from sqlalchemy import insert

from agentjournal import Journal
from agentjournal.integrations.adk import JournalSessionService
from agentjournal.integrations.adk_events import (
    SESSION_LISTED,
    SESSION_OPENED,
    USER_LISTED,
    event_batch,
    journal_id,
    session_metadata,
)

APP = "bench"
PER_USER = 10
T0 = 1_700_000_000.0


def event(n: int, *, delta: bool = False, shared: bool = False) -> Event:
    role, author = ("user", "user") if n % 2 == 0 else ("model", "agent")
    state = {"n": n} if delta else {}
    if shared:
        state.update({"n": n, "app:n": n, "user:n": n})
    return Event(
        id=f"e{n}",
        invocation_id=f"inv{n // 2}",
        author=author,
        timestamp=T0 + n / 1000,
        content=types.Content(role=role, parts=[types.Part(text=f"订单 {n}: " + "x" * 150)]),
        actions=EventActions(state_delta=state),
    )


async def median_us(call: Callable[[], Awaitable[Any]], times: int) -> float:
    taken = []
    for _ in range(times):
        start = time.perf_counter()
        await call()
        taken.append(time.perf_counter() - start)
    return statistics.median(taken) * 1e6


# -- loading in bulk --------------------------------------------------------------------------


def load_journal_events(path: Path, session_id: str, count: int) -> None:
    with Journal.open(str(path), durability="normal") as journal:
        jid = journal_id("session", APP, "u0", session_id)
        metadata = session_metadata(APP, "u0", session_id, T0, {})
        journal.create_session(session_id, session_id=jid, metadata=metadata)
        journal.append(jid, SESSION_OPENED, {})  # as `create_session` makes it an ADK session
        seq, batch = 2, []
        for n in range(count):
            data = event(n).model_dump(mode="json", exclude_none=True)
            made = event_batch(
                data, first_seq=seq + 1, state_seq=1, state=None, used_calls=(), open_calls=()
            )
            batch += made
            seq += len(made)
            if len(batch) >= 500:
                journal.append_many(jid, batch)
                batch = []
        if batch:
            journal.append_many(jid, batch)


def load_journal_sessions(path: Path, count: int) -> None:
    with Journal.open(str(path), durability="normal") as journal:
        users = journal_id("users", APP)
        journal.create_session("ADK users", session_id=users, metadata={"integration": "adk"})
        names = [f"u{i}" for i in range(count // PER_USER)]
        for start in range(0, len(names), 500):
            listed = [(USER_LISTED, {"user_id": u}) for u in names[start : start + 500]]
            journal.append_many(users, [{"type": t, "payload": p} for t, p in listed])
        for index, user in enumerate(names):
            directory = journal_id("sessions", APP, user)
            journal.create_session("ADK sessions", session_id=directory, metadata={})
            sids = [f"s{k}" for k in range(PER_USER)]
            listed_events = [{"type": SESSION_LISTED, "payload": {"session_id": s}} for s in sids]
            journal.append_many(directory, listed_events)
            opened = {}
            for k, sid in enumerate(sids):
                created = T0 + index * PER_USER + k
                jid = journal_id("session", APP, user, sid)
                metadata = session_metadata(APP, user, sid, created, {"k": k})
                journal.create_session(sid, session_id=jid, metadata=metadata)
                opened[jid] = [{"type": SESSION_OPENED, "payload": {}}]
            journal.append_across(opened)  # as `create_session` makes them ADK sessions


async def load_database(
    service: DatabaseSessionService, sessions: int, events: int, session_id: str = "long"
) -> None:
    await service.prepare_tables()
    now = datetime.datetime.fromtimestamp(T0, datetime.UTC).replace(tzinfo=None)
    async with service.db_engine.begin() as conn:
        await conn.execute(insert(StorageUserState), [{"app_name": APP, "user_id": "u0"}])
        rows = []
        for i in range(sessions):
            at = now + datetime.timedelta(seconds=i)
            user = f"u{i // PER_USER}"
            rows.append(
                {
                    "app_name": APP,
                    "user_id": user,
                    "id": f"s{i % PER_USER}",
                    "state": {"k": i % PER_USER},
                    "create_time": at,
                    "update_time": at,
                }
            )
        if events:
            rows.append(
                {
                    "app_name": APP,
                    "user_id": "u0",
                    "id": session_id,
                    "state": {},
                    "create_time": now,
                    "update_time": now,
                }
            )
        for start in range(0, len(rows), 5000):
            await conn.execute(insert(StorageSession), rows[start : start + 5000])
        holder = Session(id=session_id, app_name=APP, user_id="u0")
        batch = []
        for n in range(events):
            row = StorageEvent.from_event(holder, event(n))
            batch.append(
                {
                    column: getattr(row, column)
                    for column in (
                        "id",
                        "invocation_id",
                        "session_id",
                        "app_name",
                        "user_id",
                        "timestamp",
                        "event_data",
                    )
                }
            )
            if len(batch) >= 5000:
                await conn.execute(insert(StorageEvent), batch)
                batch = []
        if batch:
            await conn.execute(insert(StorageEvent), batch)
    from google.adk.sessions.schemas.v1 import StorageAppState

    async with service.db_engine.begin() as conn:
        await conn.execute(insert(StorageAppState), [{"app_name": APP}])


# -- the measures -----------------------------------------------------------------------------


async def measure_append(folder: Path, count: int, *, shared: bool = False) -> dict[str, float]:
    results = {}
    stem = "append-shared" if shared else "append"
    ours = JournalSessionService.open(str(folder / f"{stem}.journal"))
    theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / f'{stem}.adk'}")
    try:
        for name, service in (("journal", ours), ("adk", theirs)):
            await service.create_session(app_name=APP, user_id="u", session_id="s")
            session = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert session is not None
            taken = []
            for n in range(count):
                item = event(n, delta=n % 4 == 0, shared=shared)
                start = time.perf_counter()
                await service.append_event(session, item)
                taken.append(time.perf_counter() - start)
            results[name] = statistics.median(taken) * 1e6
    finally:
        await ours.close()
        await theirs.close()
    return results


async def measure_get(folder: Path, size: int) -> dict[str, float]:
    journal_path = folder / f"get{size}.journal"
    load_journal_events(journal_path, "long", size)
    theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / f'get{size}.adk'}")
    await load_database(theirs, 0, size)
    config = GetSessionConfig(num_recent_events=20)
    results = {}
    async with JournalSessionService.open(str(journal_path)) as ours:
        for name, service in (("journal", ours), ("adk", theirs)):

            async def get(service: Any = service) -> Any:
                return await service.get_session(
                    app_name=APP, user_id="u0", session_id="long", config=config
                )

            found = await get()
            assert found is not None
            assert [e.id for e in found.events] == [f"e{n}" for n in range(size - 20, size)]
            results[name] = await median_us(get, 21)
    await theirs.close()
    return results


async def measure_list(folder: Path, size: int, whole_app: bool) -> dict[str, float]:
    journal_path = folder / f"list{size}.journal"
    load_journal_sessions(journal_path, size)
    theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / f'list{size}.adk'}")
    await load_database(theirs, size, 0)
    results = {}
    async with JournalSessionService.open(str(journal_path)) as ours:
        for name, service in (("journal", ours), ("adk", theirs)):

            async def one(service: Any = service) -> Any:
                return await service.list_sessions(app_name=APP, user_id="u7")

            listed = (await one()).sessions
            assert [s.id for s in listed] == [f"s{k}" for k in range(PER_USER)], listed
            results[name] = await median_us(one, 7)
            if whole_app:

                async def everyone(service: Any = service) -> Any:
                    return await service.list_sessions(app_name=APP)

                assert len((await everyone()).sessions) == size
                results[f"{name} app"] = await median_us(everyone, 3)
    await theirs.close()
    return results


def row(measure: str, ours: float, theirs: float) -> str:
    return f"| {measure} | {ours:,.0f} µs | {theirs:,.0f} µs | {theirs / ours:.1f}x |"


async def run(folder: Path, sizes: list[int], appends: int) -> list[str]:
    lines = [
        "| measure | JournalSessionService | DatabaseSessionService | ratio |",
        "| --- | --- | --- | --- |",
    ]
    appended = await measure_append(folder, appends)
    lines.append(row("append_event (1 event)", appended["journal"], appended["adk"]))
    appended = await measure_append(folder, appends, shared=True)
    lines.append(
        row("append_event with app: and user: state", appended["journal"], appended["adk"])
    )
    for size in sizes:
        got = await measure_get(folder, size)
        lines.append(row(f"get_session latest 20 @{size:,} events", got["journal"], got["adk"]))
    for index, size in enumerate(sizes):
        listed = await measure_list(folder, size, whole_app=index < 2)
        lines.append(
            row(f"list_sessions 1 user @{size:,} sessions", listed["journal"], listed["adk"])
        )
        if "journal app" in listed:
            lines.append(
                row(
                    f"list_sessions whole app @{size:,} sessions",
                    listed["journal app"],
                    listed["adk app"],
                )
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100 and 1,000")
    parser.add_argument("--dir", default=None, help="where the databases go (a temp dir)")
    parser.add_argument("--appends", type=int, default=None, help="events in the append measure")
    args = parser.parse_args(argv)
    sizes = [100, 1_000] if args.quick else [1_000, 10_000, 100_000]
    appends = args.appends or (30 if args.quick else 300)
    print(
        f"{'QUICK ' if args.quick else ''}ADK session services, {platform.python_version()},"
        f" google-adk {importlib.metadata.version('google-adk')},"
        f" {platform.machine()} {platform.system()}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for line in asyncio.run(run(Path(folder), sizes, appends)):
            print(line, flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""agentjournal beside the stores a user would pick instead, on one agent workload, in one run.

    .venv/bin/python bench/peers_bench.py            # the full run (a few minutes)
    .venv/bin/python bench/peers_bench.py --quick    # a smoke run (100 turns; rough figures)

The peers: raw `sqlite3` (4 INSERTs into one table, WAL), the OpenAI Agents SDK's `SQLiteSession`
and `eventsourcing` on SQLite (one aggregate per conversation, one event per item, one `save` per
turn). `pip install 'agentjournal[peers]'` installs the two libraries; a peer that is not
installed is left out of the table.

One turn is 4 items (`bench/workload.py`: user message, function call, its output, assistant
message; ≈ 1.4 kB of JSON), written as one transaction and durable at return. Each system grows
one session to 1,000 turns (`--turns`) in a fresh process; a round runs every system once, in an
order that rotates between rounds, and a figure is the median of the rounds' figures (3 rounds).

- **write**: the median time of one turn's write over the second half of the session's growth,
  at `synchronous = FULL` (SQLite's default in this build, and every peer's) and, for the systems
  that let one choose, at `NORMAL`.
- **the tail**: the 99th percentile of one turn's write divided by the median, over the first
  10, 100 and all the turns (at 10 turns the 99th percentile is the slowest), at each durability;
  a store whose work comes in bursts (a checkpoint, a batch of index maintenance) shows it here.
- **4 processes × N/5 turns**: four processes each write their own session of one new file at
  once, FULL; turns per second over the wall time from the first write to the last, and how
  many writes failed with "database is locked" (a failed write is counted and not retried).
- **bytes per turn**: the files' size after closing (WAL checkpointed), divided by the turns.
- **read everything back**: every item of the session, decoded, as each system gives them to an
  application (agentjournal: `Journal.events` pages; SQLiteSession: `get_items()`;
  eventsourcing: the aggregate from its repository; raw: `SELECT` + `json.loads`); 5 reads.
- **read the last 20**: the newest 20 items, oldest first; 101 reads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import importlib.metadata
import json
import multiprocessing
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from workload import turn_events, turn_items

SEED = 20261203
PROCESSES = 4
READS_ALL = 5
READS_LAST = 101


class Store(Protocol):
    def write(self, n: int) -> None: ...
    def read_all(self) -> list[Any]: ...
    def read_last(self, count: int) -> list[Any]: ...
    def close(self) -> None: ...


class Raw:
    name = "raw sqlite3"

    def __init__(self, path: Path, durability: str, session: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {durability.upper()}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, session TEXT NOT NULL,"
            " data TEXT NOT NULL)"
        )
        self.conn.execute("CREATE INDEX IF NOT EXISTS items_by_session ON items (session, id)")
        self.session = session

    def write(self, n: int) -> None:
        rows = [(self.session, json.dumps(item)) for item in turn_items(n, SEED)]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("INSERT INTO items (session, data) VALUES (?, ?)", rows)
        self.conn.execute("COMMIT")

    def read_all(self) -> list[Any]:
        rows = self.conn.execute(
            "SELECT data FROM items WHERE session = ? ORDER BY id", (self.session,)
        )
        return [json.loads(data) for (data,) in rows]

    def read_last(self, count: int) -> list[Any]:
        rows = self.conn.execute(
            "SELECT data FROM items WHERE session = ? ORDER BY id DESC LIMIT ?",
            (self.session, count),
        ).fetchall()
        return [json.loads(data) for (data,) in reversed(rows)]

    def close(self) -> None:
        self.conn.close()


class AgentJournal:
    name = "agentjournal"

    def __init__(self, path: Path, durability: str, session: str) -> None:
        from agentjournal import Conflict, Journal

        self.journal = Journal.open(str(path), durability=durability)
        with contextlib.suppress(Conflict):  # another process of the same run made it
            self.journal.create_session(session_id=session)
        self.session = session

    def write(self, n: int) -> None:
        self.journal.append_many(self.session, turn_events(n, SEED))

    def read_all(self) -> list[Any]:
        events, page = [], self.journal.events(self.session, limit=10_000)
        while page:
            events += page
            page = self.journal.events(self.session, after=page[-1].seq, limit=10_000)
        return events[1:]  # session_created is the journal's, not an item

    def read_last(self, count: int) -> list[Any]:
        last = self.journal.get_session(self.session).last_seq
        return self.journal.events(self.session, before=last + 1, limit=count)

    def close(self) -> None:
        self.journal.close()


class AgentsSession:
    name = "SQLiteSession"

    def __init__(self, path: Path, durability: str, session: str) -> None:
        from agents import SQLiteSession

        self.session = SQLiteSession(session, str(path))
        self.loop = asyncio.new_event_loop()  # one loop, as an application has

    def write(self, n: int) -> None:
        items = turn_items(n, SEED)
        self.loop.run_until_complete(self.session.add_items(items))  # type: ignore[arg-type]

    def read_all(self) -> list[Any]:
        return self.loop.run_until_complete(self.session.get_items())

    def read_last(self, count: int) -> list[Any]:
        return self.loop.run_until_complete(self.session.get_items(limit=count))

    def close(self) -> None:
        self.session.close()
        self.loop.close()


class EventSourcing:
    name = "eventsourcing"

    def __init__(self, path: Path, durability: str, session: str) -> None:
        from eventsourcing.application import Application

        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(path),
            "SQLITE_LOCK_TIMEOUT": "5",
        }
        self.app = Application(env=env)
        self.conversation = _conversation_class()(session)
        self.app.save(self.conversation)

    def write(self, n: int) -> None:
        for item in turn_items(n, SEED):
            self.conversation.add(item)
        self.app.save(self.conversation)

    def read_all(self) -> list[Any]:
        return list(self.app.repository.get(self.conversation.id).items)

    def read_last(self, count: int) -> list[Any]:
        stored = self.app.recorder.select_events(self.conversation.id, desc=True, limit=count)
        events = [self.app.mapper.to_domain_event(s) for s in stored]
        return [e.item for e in reversed(events)]  # type: ignore[attr-defined]

    def close(self) -> None:
        self.app.close()


@functools.cache
def _conversation_class() -> Any:
    """The aggregate, defined once per process (eventsourcing registers each class by name)."""
    from eventsourcing.domain import Aggregate, event

    class Conversation(Aggregate):  # type: ignore[misc]
        def __init__(self, name: str) -> None:
            self.name = name
            self.items: list[Any] = []

        @event("ItemAdded")
        def add(self, item: dict[str, Any]) -> None:
            self.items.append(item)

    return Conversation


SYSTEMS: dict[str, Callable[[Path, str, str], Store]] = {
    "raw sqlite3": Raw,
    "agentjournal": AgentJournal,
    "SQLiteSession": AgentsSession,
    "eventsourcing": EventSourcing,
}
CHOOSES_DURABILITY = ("raw sqlite3", "agentjournal")
PEER_PACKAGES = {"SQLiteSession": "openai-agents", "eventsourcing": "eventsourcing"}


def available() -> list[str]:
    found = []
    for name in SYSTEMS:
        package = PEER_PACKAGES.get(name)
        try:
            if package:
                importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def files_size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


# -- one system, one session, in a fresh process ----------------------------------------------


def grow(name: str, workdir: str, turns: int, durability: str) -> dict[str, float]:
    directory = Path(workdir)
    directory.mkdir(parents=True)
    store = SYSTEMS[name](directory / "store.db", durability, "user-42")
    times = []
    for n in range(turns):
        start = time.perf_counter()
        store.write(n)
        times.append(time.perf_counter() - start)
    result = {"write": statistics.median(times[turns // 2 :])}
    for window in tail_windows(turns):
        result[f"tail{window}"] = percentile(times[:window], 0.99) / statistics.median(
            times[:window]
        )
    if durability == "full":
        assert len(store.read_all()) == 4 * turns
        assert len(store.read_last(20)) == 20
        result["read_all"] = _timed(store.read_all, READS_ALL)
        result["read_last"] = _timed(lambda: store.read_last(20), READS_LAST)
    store.close()
    result["bytes"] = files_size(directory) / turns
    return result


def tail_windows(turns: int) -> list[int]:
    return sorted({min(10, turns), min(100, turns), turns})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(read: Callable[[], Any], times: int) -> float:
    taken = []
    for _ in range(times):
        start = time.perf_counter()
        read()
        taken.append(time.perf_counter() - start)
    return statistics.median(taken)


def write_share(name: str, path: str, session: str, turns: int, barrier: Any) -> dict[str, float]:
    """One of the processes writing at once: opens its store, waits for the others, writes
    `turns` turns; when it started and ended, and how many writes failed with "database is
    locked"."""
    store = SYSTEMS[name](Path(path), "full", session)
    barrier.wait()
    start, locked = time.time(), 0
    for n in range(turns):
        try:
            store.write(n)
        except Exception as exc:  # each peer raises its own type; the text says what it is
            if "locked" not in str(exc):
                raise
            locked += 1
    end = time.time()
    store.close()
    return {"start": start, "end": end, "locked": locked}


def together(name: str, workdir: str, turns: int) -> dict[str, float]:
    directory = Path(workdir)
    directory.mkdir(parents=True)
    path = directory / "store.db"
    SYSTEMS[name](path, "full", "setup").close()  # the schema exists before the race
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        barrier = manager.Barrier(PROCESSES)
        shares = [
            pool.submit(write_share, name, str(path), f"p{i}", turns, barrier)
            for i in range(PROCESSES)
        ]
        done = [share.result() for share in shares]
    elapsed = max(d["end"] for d in done) - min(d["start"] for d in done)
    return {"turns_per_s": PROCESSES * turns / elapsed, "locked": sum(d["locked"] for d in done)}


# -- the run ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 turns, 1 round: a smoke run")
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    turns, rounds = (100, 1) if args.quick else (args.turns, args.rounds)
    names = available()
    context = multiprocessing.get_context("spawn")
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for round_ in range(rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                for durability in ("full", "normal"):
                    if durability == "normal" and name not in CHOOSES_DURABILITY:
                        continue
                    workdir = os.path.join(tmp, f"{round_}-{name}-{durability}")
                    with ProcessPoolExecutor(1, mp_context=context) as pool:
                        figures = pool.submit(grow, name, workdir, turns, durability).result()
                    results.setdefault((name, durability), []).append(figures)
                workdir = os.path.join(tmp, f"{round_}-{name}-together")
                figures = together(name, workdir, turns // 5)
                results.setdefault((name, "together"), []).append(figures)
    print(header(turns, rounds, names, time.perf_counter() - started, args.quick))
    print(table(results, names, turns))


def header(turns: int, rounds: int, names: list[str], seconds: float, quick: bool) -> str:
    versions = [f"SQLite {sqlite3.sqlite_version}"]
    for name in names:
        package = PEER_PACKAGES.get(name)
        if package:
            versions.append(f"{package} {importlib.metadata.version(package)}")
    return (
        f"{datetime.date.today()} · {'QUICK' if quick else 'full'} run · {turns} turns · "
        f"{rounds} round(s) · Python {platform.python_version()} · {' · '.join(versions)} · "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs · {seconds:.0f} s"
    )


def table(
    results: dict[tuple[str, str], list[dict[str, float]]], names: list[str], turns: int
) -> str:
    def median(name: str, kind: str, key: str) -> float | None:
        rounds = results.get((name, kind))
        return statistics.median(r[key] for r in rounds) if rounds else None

    def cell(value: float | None, unit: str) -> str:
        if value is None:
            return "—"
        if unit == "ms":
            return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"
        if unit == "B":
            return f"{value:,.0f}"
        if unit == "x":
            return f"{value:.1f}×"
        return f"{value:,.0f}"

    rows = [
        ("write one turn, FULL", "full", "write", "ms"),
        ("write one turn, NORMAL", "normal", "write", "ms"),
        *(
            (f"p99 ÷ median of one turn @{w:,} turns, {d.upper()}", d, f"tail{w}", "x")
            for d in ("full", "normal")
            for w in tail_windows(turns)
        ),
        (
            f"{PROCESSES} processes × {turns // 5} turns, FULL (turns/s)",
            "together",
            "turns_per_s",
            "n",
        ),
        ('… writes failing with "database is locked"', "together", "locked", ""),
        ("bytes on disk per turn (closed)", "full", "bytes", "B"),
        (f"read everything back ({4 * turns:,} items)", "full", "read_all", "ms"),
        ("read the last 20", "full", "read_last", "ms"),
    ]
    lines = [
        "| per turn | " + " | ".join(names) + " | agentjournal ÷ raw |",
        "| --- |" + " ---: |" * (len(names) + 1),
    ]
    for label, kind, key, unit in rows:
        cells = [cell(median(name, kind, key), unit) for name in names]
        ours, raw = median("agentjournal", kind, key), median("raw sqlite3", kind, key)
        comparable = key != "locked" and not key.startswith("tail")
        ratio = f"{ours / raw:.2f}" if ours is not None and raw and comparable else "—"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

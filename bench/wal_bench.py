"""The `-wal` file under sustained writes and after a bulk import: 1,000,000 events a scenario,
once with SQLite's automatic checkpoints alone (the baseline: `wal_autocheckpoint = 1000`, the
second seed's fix) and once with agentjournal's WAL limit (`backends/sqlite_wal.py`).

    .venv/bin/python bench/wal_bench.py                    # 1,000,000 events per scenario
    .venv/bin/python bench/wal_bench.py --events 50000     # smoke run, seconds

In the sustained scenarios one writer appends agent turns with `append_many` (`--batch` events a
call) to `--sessions` sessions while `--readers` threads read, and after every call it samples the
`-wal` file's size. The readers differ:

- short reads: each reads pages of events through the journal (`events(after=…)`), as SSE
  subscribers and pollers do; there are moments with no reader, so SQLite's own checkpoint
  rewinds the WAL.
- overlapping reads: each holds a read transaction for `--hold-ms` on its own connection (a
  dashboard, a `sqlite3` shell, a slow export reading the same file), staggered so one is always
  open: SQLite's checkpoint copies pages back but never finds a moment to rewind the WAL
  ("checkpoint starvation" in SQLite's WAL documentation).
- a long read: short reads, and every `--long-read-every` seconds one read transaction held for
  `--long-read-for` seconds; no checkpoint can pass its snapshot, so the WAL grows meanwhile under
  any policy; what matters is whether it comes back.

Bulk: the same number of events arrive in one transaction (`agentjournal import` of a JSON Lines
file, streamed from a generator), as a restore or a migration does; the WAL holds the whole
transaction until it is checkpointed.

Each run is its own process (its peak RSS is its own); the table gives events/s with the ratio
against the baseline of the same scenario, the WAL's peak, and its size at the end: after one
more commit once the readers have stopped and any backoff has passed, which is what stays on disk.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from agentjournal.backends.sqlite import SQLiteStorage
from agentjournal.backends.sqlite_wal import DEFAULT_WAL_LIMIT_BYTES, MAX_BACKOFF_S
from agentjournal.transfer import import_lines
from journal_bench import new_events, peak_rss_mb, source_fingerprint, turn

MB = 1024 * 1024
Spec = tuple[str, dict[str, Any]]


def turns(rng: random.Random) -> Iterator[Spec]:
    """Agent turns without end, with unique call ids (content drawn from a small pool)."""
    pool = [turn(rng, n) for n in range(64)]
    number = 0
    while True:
        number += 1
        for type_, payload in rng.choice(pool):
            if "call_id" in payload:
                payload = {**payload, "call_id": f"call_{number}"}
            yield type_, payload


def _result(
    journal: Journal, path: Path, written: int, elapsed: float, peak: int
) -> dict[str, Any]:
    wal = Path(f"{path}-wal")
    storage = journal.storage
    stats = storage.wal.stats if isinstance(storage, SQLiteStorage) and storage.wal else None
    return {
        "events_per_s": written / elapsed,
        "peak_wal_mb": max(peak, wal.stat().st_size) / MB,
        "final_wal_mb": wal.stat().st_size / MB,
        "db_mb": path.stat().st_size / MB,
        "truncations": stats.checkpoints if stats else 0,
        "busy": stats.busy if stats else 0,
        "peak_rss_mb": peak_rss_mb(),
    }


def sustained(args: argparse.Namespace, limit: int | None, readers: str) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="aj-wal-") as tmp:
        path = Path(tmp) / "wal.db"
        journal = Journal(SQLiteStorage(path, "full", wal_limit_bytes=limit))
        ids = [journal.create_session(f"s{n}").session_id for n in range(args.sessions)]
        stop = threading.Event()

        def read_short(slot: int) -> None:
            local = random.Random(args.seed + slot)
            while not stop.is_set():
                sid = local.choice(ids)
                last = journal.get_session(sid).last_seq
                journal.events(sid, after=local.randint(0, max(0, last - 100)), limit=100)
                time.sleep(0.001)  # a subscriber reads after commits, not in a busy loop

        def read_overlapping(slot: int) -> None:
            local = random.Random(args.seed + slot)
            hold = args.hold_ms / 1000
            stop.wait(slot * hold / args.readers)  # staggered: a reader is always in the middle
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
                while not stop.is_set():
                    conn.execute("BEGIN")
                    conn.execute(
                        "SELECT seq, type FROM events WHERE session_id = ?"
                        " ORDER BY seq DESC LIMIT 100",
                        (local.choice(ids),),
                    ).fetchall()
                    stop.wait(hold)
                    conn.execute("COMMIT")

        def read_long() -> None:
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
                while not stop.wait(args.long_read_every):
                    conn.execute("BEGIN")
                    conn.execute("SELECT count(*) FROM events").fetchone()
                    stop.wait(args.long_read_for)
                    conn.execute("COMMIT")

        read = read_overlapping if readers == "overlapping" else read_short
        threads = [threading.Thread(target=read, args=(n,)) for n in range(args.readers)]
        if readers == "long":
            threads.append(threading.Thread(target=read_long))
        for thread in threads:
            thread.start()
        wal = Path(f"{path}-wal")
        source = turns(rng)
        peak = written = 0
        start = time.perf_counter()
        try:
            while written < args.events:
                count = min(args.batch, args.events - written)
                batch = [next(source) for _ in range(count)]
                journal.append_many(rng.choice(ids), new_events(batch))
                written += count
                peak = max(peak, wal.stat().st_size)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        elapsed = time.perf_counter() - start
        # One more commit with the readers gone, as the next append after a quiet spell (past
        # any backoff a busy checkpoint started): what is left of the WAL is what stays on disk.
        time.sleep(MAX_BACKOFF_S)
        journal.append_many(ids[0], new_events([next(source) for _ in range(args.batch)]))
        result = _result(journal, path, written, elapsed, peak)
        journal.close()
        return result


def bulk(args: argparse.Namespace, limit: int | None) -> dict[str, Any]:
    rng = random.Random(args.seed)

    def lines() -> Iterator[str]:
        per_session = args.events // args.sessions
        for n in range(args.sessions):
            source = turns(rng)  # a session ends mid-turn at worst; the next starts afresh
            sid = f"sess_bulk{n:05d}"
            yield json.dumps(
                {"session_id": sid, "seq": 1, "type": "session_created", "payload": {"title": sid}}
            )
            for seq in range(2, per_session + 2):
                type_, payload = next(source)
                yield json.dumps({"session_id": sid, "seq": seq, "type": type_, "payload": payload})

    with tempfile.TemporaryDirectory(prefix="aj-wal-") as tmp:
        path = Path(tmp) / "bulk.db"
        journal = Journal(SQLiteStorage(path, "full", wal_limit_bytes=limit))
        wal, done, peak = Path(f"{path}-wal"), threading.Event(), [0]

        def sample() -> None:  # the transaction fills the WAL before its commit empties it
            while not done.wait(0.05):
                with contextlib.suppress(FileNotFoundError):
                    peak[0] = max(peak[0], wal.stat().st_size)

        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.perf_counter()
        try:
            report = import_lines(journal, lines)
        finally:
            done.set()
            sampler.join()
        elapsed = time.perf_counter() - start
        result = _result(journal, path, report.events, elapsed, peak[0])
        journal.close()
        return result


SCENARIOS: dict[str, Callable[[argparse.Namespace, int | None], dict[str, Any]]] = {
    "short reads": functools.partial(sustained, readers="short"),
    "overlapping reads": functools.partial(sustained, readers="overlapping"),
    "a long read": functools.partial(sustained, readers="long"),
    "bulk import": bulk,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="events per append_many")
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--limit-mb", type=float, default=DEFAULT_WAL_LIMIT_BYTES / MB)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hold-ms", type=float, default=50.0, help="overlapping reads: ms held")
    parser.add_argument("--long-read-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--long-read-for", type=float, default=3.0, help="seconds")
    parser.add_argument("--only", choices=sorted(SCENARIOS), help="run one scenario")
    args = parser.parse_args(argv)
    configs = {
        "SQLite auto-checkpoint only (baseline)": None,
        f"agentjournal WAL limit ({args.limit_mb:g} MiB)": int(args.limit_mb * MB),
    }
    rows: list[tuple[str, str, dict[str, Any], float]] = []
    for scenario, run in SCENARIOS.items():
        if args.only and scenario != args.only:
            continue
        baseline = 0.0
        for name, limit in configs.items():
            with ProcessPoolExecutor(max_workers=1) as pool:
                outcome = pool.submit(run, args, limit).result()
            baseline = baseline or outcome["events_per_s"]
            rows.append((scenario, name, outcome, outcome["events_per_s"] / baseline))
            print(f"{scenario} / {name}: {outcome}", file=sys.stderr)

    table = Table(
        title=f"{args.events:,} events per scenario · append_many({args.batch}) beside"
        f" {args.readers} readers (overlapping: {args.hold_ms:g} ms each; long: a"
        f" {args.long_read_for:g} s read every {args.long_read_every:g} s) · durability full"
        f" · {datetime.date.today()}"
        f" · Python {platform.python_version()} · SQLite {sqlite3.sqlite_version}"
        f" · {os.cpu_count()} cores · sources {source_fingerprint()}"
    )
    for column in ("scenario", "configuration", "events/s", "× baseline", "peak -wal"):
        table.add_column(
            column, justify="left" if column in ("scenario", "configuration") else "right"
        )
    for column in ("-wal at end", "database"):
        table.add_column(column, justify="right")
    table.add_column("truncations (gave up)", justify="right")
    table.add_column("peak RSS", justify="right")
    for scenario, name, outcome, ratio in rows:
        table.add_row(
            scenario,
            name,
            f"{outcome['events_per_s']:,.0f}",
            f"{ratio:.2f}×",
            f"{outcome['peak_wal_mb']:,.1f} MB",
            f"{outcome['final_wal_mb']:,.1f} MB",
            f"{outcome['db_mb']:,.0f} MB",
            f"{outcome['truncations']:,} ({outcome['busy']:,})",
            f"{outcome['peak_rss_mb']:,.0f} MB",
        )
    Console(width=220).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

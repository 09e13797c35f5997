"""The `-wal` file under sustained writes: 1,000,000 events with readers running, once with
SQLite's automatic checkpoints alone (the baseline: `wal_autocheckpoint = 1000`, the second
seed's fix) and once with agentjournal's WAL limit (`backends/sqlite_wal.py`).

    .venv/bin/python bench/wal_bench.py                    # 1,000,000 events
    .venv/bin/python bench/wal_bench.py --events 50000     # smoke run, seconds

One writer appends agent turns with `append_many` (`--batch` events a call) to `--sessions`
sessions while `--readers` threads keep reading pages of events (`events(after=…)`), as SSE
subscribers and pollers do, and every `--long-read-every` seconds another connection holds one
read transaction open for `--long-read-for` seconds (a report, a `sqlite3` shell, a copy): no
checkpoint can pass its snapshot, so the WAL grows meanwhile under any policy; what matters is
whether it comes back. After every call the writer samples the `-wal` file's size. Each
configuration runs in its own process, so each peak RSS is its own; the two run in turn
`--rounds` times and the table shows the medians (ratios of events/s against the baseline of the
same round).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from agentjournal.backends.sqlite import SQLiteStorage
from agentjournal.backends.sqlite_wal import DEFAULT_WAL_LIMIT_BYTES
from journal_bench import new_events, peak_rss_mb, source_fingerprint, turn

MB = 1024 * 1024


def run(
    events: int,
    sessions: int,
    batch: int,
    readers: int,
    limit: int | None,
    seed: int,
    long_every: float,
    long_for: float,
) -> dict[str, Any]:
    """One configuration in a fresh process and directory: write, sample, report."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="aj-wal-") as tmp:
        path = Path(tmp) / "wal.db"
        journal = Journal(SQLiteStorage(path, "full", wal_limit_bytes=limit))
        ids = [journal.create_session(f"s{n}").session_id for n in range(sessions)]
        texts = [turn(rng, n) for n in range(64)]  # reused content; call ids made unique below
        turns = 0
        stop = threading.Event()
        reads = [0] * readers

        def read(slot: int) -> None:
            local = random.Random(seed + slot)
            while not stop.is_set():
                sid = local.choice(ids)
                last = journal.get_session(sid).last_seq
                journal.events(sid, after=local.randint(0, max(0, last - 100)), limit=100)
                reads[slot] += 1
                time.sleep(0.001)  # a subscriber reads after commits, not in a busy loop

        long_reading = threading.Event()

        def read_long() -> None:
            # A reader that holds one snapshot for a while (a report, a sqlite3 shell, a copy):
            # no checkpoint can pass it, so the WAL grows meanwhile, whatever the policy.
            conn = sqlite3.connect(path, isolation_level=None)
            while not stop.wait(long_every):
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM events").fetchone()
                long_reading.set()
                stop.wait(long_for)
                conn.execute("COMMIT")
                long_reading.clear()
            conn.close()

        threads = [threading.Thread(target=read, args=(n,)) for n in range(readers)]
        if long_every > 0:
            threads.append(threading.Thread(target=read_long))
        for thread in threads:
            thread.start()
        wal = Path(str(path) + "-wal")
        peak = peak_between = written = 0
        start = time.perf_counter()
        try:
            while written < events:
                count = min(batch, events - written)
                specs: list[tuple[str, dict[str, Any]]] = []
                while len(specs) < count:
                    turns += 1
                    for type_, payload in rng.choice(texts):
                        if "call_id" in payload:
                            payload = {**payload, "call_id": f"call_{turns}"}
                        specs.append((type_, payload))
                journal.append_many(rng.choice(ids), new_events(specs[:count]))
                written += count
                size = wal.stat().st_size
                peak = max(peak, size)
                if not long_reading.is_set():
                    peak_between = max(peak_between, size)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        elapsed = time.perf_counter() - start
        final = wal.stat().st_size
        storage = journal.storage
        stats = storage.wal.stats if isinstance(storage, SQLiteStorage) and storage.wal else None
        db_size = path.stat().st_size
        journal.close()
        return {
            "events_per_s": written / elapsed,
            "peak_wal_mb": peak / MB,
            "peak_between_mb": peak_between / MB,
            "final_wal_mb": final / MB,
            "db_mb": db_size / MB,
            "reads": sum(reads),
            "truncations": stats.checkpoints if stats else 0,
            "busy": stats.busy if stats else 0,
            "peak_rss_mb": peak_rss_mb(),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="events per append_many")
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--limit-mb", type=float, default=DEFAULT_WAL_LIMIT_BYTES / MB)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--long-read-every", type=float, default=10.0, help="seconds; 0: no long reader"
    )
    parser.add_argument("--long-read-for", type=float, default=3.0, help="seconds")
    args = parser.parse_args(argv)
    configs = {
        "SQLite auto-checkpoint only (baseline)": None,
        f"agentjournal WAL limit ({args.limit_mb:g} MiB)": int(args.limit_mb * MB),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    ratios: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds):
        baseline = 0.0
        for name, limit in configs.items():
            # A fresh process per run: its peak RSS is its own, and no page cache state leaks.
            with ProcessPoolExecutor(max_workers=1) as pool:
                outcome = pool.submit(
                    run,
                    args.events,
                    args.sessions,
                    args.batch,
                    args.readers,
                    limit,
                    args.seed,
                    args.long_read_every,
                    args.long_read_for,
                ).result()
            baseline = baseline or outcome["events_per_s"]
            results[name].append(outcome)
            ratios[name].append(outcome["events_per_s"] / baseline)
            print(f"round {round_ + 1}: {name}: {outcome}", file=sys.stderr)

    table = Table(
        title=f"{args.events:,} events, {args.readers} readers, append_many({args.batch}),"
        f" durability full · {datetime.date.today()} · {platform.python_version()}"
        f" · SQLite {__import__('sqlite3').sqlite_version} · {os.cpu_count()} cores"
        f" · sources {source_fingerprint()}"
    )
    for column in (
        "configuration",
        "events/s",
        "× baseline",
        "peak -wal",
        "peak -wal outside long reads",
        "-wal at end",
        "database",
        "WAL truncations (busy)",
        "peak RSS",
    ):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for name, runs in results.items():

        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(run[key] for run in runs)

        table.add_row(
            name,
            f"{median('events_per_s'):,.0f}",
            f"{statistics.median(ratios[name]):.2f}×",
            f"{median('peak_wal_mb'):,.1f} MB",
            f"{median('peak_between_mb'):,.1f} MB",
            f"{median('final_wal_mb'):,.1f} MB",
            f"{median('db_mb'):,.0f} MB",
            f"{median('truncations'):,.0f} ({median('busy'):,.0f})",
            f"{median('peak_rss_mb'):,.0f} MB",
        )
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Full-text search: what indexing costs the write path, and how fast a search answers at scale.

    .venv/bin/python bench/search_bench.py                  # both backends, 1,000,000 events
    .venv/bin/python bench/search_bench.py --backend sqlite --events 200000
    .venv/bin/python bench/search_bench.py --quick          # a smoke run (rough figures)
    .venv/bin/python bench/search_bench.py --backend postgres --pg-schema search_1m --search-only
                                  # keeps the built journal in that schema; a later run reuses it

Write cost: one writer appending one ~150-character message per call, with the search index and
without it (the storage's `search_index=False`), in alternating rounds in the same process, so
both see the same noise; the median round of each, and their ratio. Search: a journal of N events
(sessions of 1,000 events, built with `append_many` at `durability="normal"`), then each query
asked repeatedly: a word in about half the events, one in a few percent, one in a single event, two
words together, a Chinese word, and a prefix; median and p99 latency of `Journal.search` (first
page, 20 hits, snippets included) over all of them, and per query. Text comes from a fixed seed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentjournal import Journal, NewEvent
from agentjournal.backends.postgres import PostgresStorage
from agentjournal.backends.sqlite import SQLiteStorage

ADMIN_URL = os.environ.get("AGENTJOURNAL_BENCH_PG", "postgresql://127.0.0.1:5432/test")
DIRECTORY: str | None = None  # --dir: where the SQLite files go (default: the system's temp)
WRITE_TARGET = 0.85  # appends/s with the index >= 85 % of without (indexing costs < 15 %)
SEARCH_TARGET_MS = 100.0  # p99 at 1,000,000 events
SESSION_LENGTH = 1_000

COMMON = "order"  # in about half the events
WORDS = [
    "please",
    "check",
    "the",
    "status",
    "of",
    "my",
    "refund",
    "shipping",
    "invoice",
    "payment",
    "account",
    "delivery",
    "address",
    "customer",
    "support",
    "ticket",
    "reply",
    "thanks",
    "hello",
    "tomorrow",
    "today",
    "package",
    "warehouse",
    "courier",
    "label",
    "return",
    "exchange",
    "discount",
    "coupon",
    "subscription",
    "renewal",
    "cancel",
    "upgrade",
    "plan",
    "billing",
    "receipt",
]
CHINESE = ["订单", "退款", "发货", "地址", "客服", "发票", "优惠", "物流"]


def message(rng: random.Random, n: int) -> str:
    """~150 characters: common words, a rare one now and then, an order number, some Chinese."""
    words = rng.choices(WORDS, k=18)
    if rng.random() < 0.5:
        words.insert(rng.randrange(len(words)), COMMON)
    if rng.random() < 0.03:
        words.append("walrus")  # a few percent
    if rng.random() < 0.2:
        words.append(f"我的{rng.choice(CHINESE)}数量")
    words.append(f"#{n}")
    return " ".join(words)


def queries(events: int) -> dict[str, str]:
    return {
        "common word (~50 %)": COMMON,
        "uncommon word (~3 %)": "walrus",
        "rare: one event": str(events // 2),
        "two words": f"{COMMON} refund",
        "Chinese word": "订单",
        "one Chinese character": "退",
        "prefix": "warehou*",
    }


@contextmanager
def opened(
    backend: str, durability: str, *, search_index: bool = True, keep: str | None = None
) -> Iterator[Journal]:
    """A fresh journal, gone afterwards; on PostgreSQL `keep` names a schema that stays."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(dir=DIRECTORY) as folder:
            storage = SQLiteStorage(
                Path(folder) / "bench.db", durability, search_index=search_index
            )
            with Journal(storage) as journal:
                yield journal
        return
    import psycopg

    schema = keep or f"search_bench_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    url = f"{ADMIN_URL}?schema={schema}" if "?" not in ADMIN_URL else f"{ADMIN_URL}&schema={schema}"
    try:
        with Journal(PostgresStorage(url, durability, search_index=search_index)) as journal:
            yield journal
    finally:
        if keep is None:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def stored_events(journal: Journal) -> int:
    """How many events a kept PostgreSQL schema already holds (0 for a new one)."""
    import psycopg

    storage = journal.storage
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {storage.schema}")
        row = conn.execute("SELECT count(*) FROM events").fetchone()
    return int(row[0]) if row else 0


def appends_per_second(journal: Journal, sid: str, count: int, rng: random.Random) -> float:
    texts = [message(rng, n) for n in range(count)]
    started = time.perf_counter()
    for text in texts:
        journal.append(sid, "user_message", {"content": text})
    return count / (time.perf_counter() - started)


def write_cost(backend: str, durability: str, appends: int, rounds: int) -> tuple[float, float]:
    """Median appends/s with the index and without it, alternating rounds."""
    rng = random.Random(7)
    with_index: list[float] = []
    without: list[float] = []
    with (
        opened(backend, durability) as indexed,
        opened(backend, durability, search_index=False) as plain,
    ):
        sids = {
            True: indexed.create_session("w").session_id,
            False: plain.create_session("w").session_id,
        }
        appends_per_second(indexed, sids[True], appends // 4, rng)  # warm up both
        appends_per_second(plain, sids[False], appends // 4, rng)
        for round_ in range(rounds):
            # Which side goes first alternates too: a burst of load elsewhere hits both alike.
            sides = [(True, with_index), (False, without)]
            for flag, found in sides if round_ % 2 == 0 else sides[::-1]:
                found.append(
                    appends_per_second(indexed if flag else plain, sids[flag], appends, rng)
                )
    return statistics.median(with_index), statistics.median(without)


def build(journal: Journal, events: int, progress: Callable[[str], None]) -> None:
    rng = random.Random(11)
    n = 0
    started = time.perf_counter()
    while n < events:
        sid = journal.create_session(f"customer {n // SESSION_LENGTH}").session_id
        n += 1
        for _ in range(0, SESSION_LENGTH - 1, 500):
            size = min(500, SESSION_LENGTH - 1, events - n)
            if size <= 0:
                break
            batch = [
                NewEvent("user_message", {"content": message(rng, n + k)}) for k in range(size)
            ]
            journal.append_many(sid, batch)
            n += size
        if n % 100_000 < SESSION_LENGTH:
            progress(f"  {n:,} events ({time.perf_counter() - started:.0f} s)")


def analyze(journal: Journal) -> None:
    """What autovacuum does soon after a bulk load: statistics for the planner."""
    import psycopg

    storage = journal.storage
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {storage.schema}")
        conn.execute("ANALYZE search_index, events, sessions")


def search_latencies(journal: Journal, events: int, repeats: int) -> dict[str, list[float]]:
    asked = queries(events)
    journal.search(COMMON)  # the SQLite index catches up with the build's last events here
    found: dict[str, list[float]] = {name: [] for name in asked}
    for _ in range(repeats):
        for name, query in asked.items():
            started = time.perf_counter()
            journal.search(query, limit=20)
            found[name].append((time.perf_counter() - started) * 1000)
    return found


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", help="directory for the SQLite files (default: temp)")
    parser.add_argument(
        "--pg-schema",
        help="PostgreSQL: build the journal in this schema and keep it; if it already holds"
        " the events (the same seed), search it without building (an 8-minute build here)",
    )
    parser.add_argument("--search-only", action="store_true", help="skip the write-cost rounds")
    args = parser.parse_args()
    global DIRECTORY
    DIRECTORY = args.dir
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    events = 3_000 if args.quick else args.events
    appends, rounds = (100, 2) if args.quick else (1_024, 12)
    repeats = 3 if args.quick else 50
    console = Console(width=130)
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731

    table = Table(title=f"search · {events:,} events{' · QUICK' if args.quick else ''}")
    for column in (
        "backend",
        "benchmark",
        "with index",
        "without",
        "ratio / p99",
        "target",
        "met?",
    ):
        table.add_column(column)
    for backend in backends:
        for durability in () if args.search_only else ("full", "normal"):
            say(f"{backend}: appends/s at {durability}, with and without the index")
            indexed, plain = write_cost(backend, durability, appends, rounds)
            ratio = indexed / plain
            table.add_row(
                backend,
                f"appends/s, one writer · {durability}",
                f"{indexed:,.0f} ev/s",
                f"{plain:,.0f} ev/s",
                f"{ratio:.2f}×",
                f"≥ {WRITE_TARGET:.2f}×",
                "yes" if ratio >= WRITE_TARGET else "NO",
            )
        keep = args.pg_schema if backend == "postgres" else None
        with opened(backend, "normal", keep=keep) as journal:
            started = time.perf_counter()
            if keep and stored_events(journal) >= events:
                say(f"{backend}: schema {keep} already holds the events: not building")
            else:
                say(f"{backend}: building {events:,} events")
                build(journal, events, say)
            built = time.perf_counter() - started
            if backend == "postgres":
                analyze(journal)
            say(f"{backend}: searching")
            latencies = search_latencies(journal, events, repeats)
        everything = [value for values in latencies.values() for value in values]
        # A prefix of a common word is the slow case (FTS5 gathers every match of every word
        # with that prefix before it can take the newest): its own row, and the target row
        # over whole words beside the row over everything.
        words = [v for name, values in latencies.items() if name != "prefix" for v in values]
        for name, values in latencies.items():
            table.add_row(
                backend,
                f"search: {name}",
                f"median {statistics.median(values):.1f} ms",
                "",
                f"p99 {p99(values):.1f} ms",
                "",
                "",
            )
        table.add_row(
            backend,
            f"search, all queries (built in {built:.0f} s)",
            f"median {statistics.median(everything):.1f} ms",
            "",
            f"p99 {p99(everything):.1f} ms",
            "—",
            "",
        )
        worst = p99(words)
        table.add_row(
            backend,
            "search, whole words (all but prefix)",
            f"median {statistics.median(words):.1f} ms",
            "",
            f"p99 {worst:.1f} ms",
            f"p99 < {SEARCH_TARGET_MS:.0f} ms",
            ("yes" if worst < SEARCH_TARGET_MS else "NO")
            if events >= 1_000_000
            else "— (below 1M)",
        )
    console.print(table)
    console.print(f"peak RSS {rss_mb():.0f} MB")


if __name__ == "__main__":
    main()

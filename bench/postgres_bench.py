"""agentjournal on PostgreSQL against raw psycopg, with the SQLite journal beside them: appends/s.

    .venv/bin/python bench/postgres_bench.py                            # about 30 s
    .venv/bin/python bench/postgres_bench.py --repeat 5                 # longer, steadier
    .venv/bin/python bench/postgres_bench.py --events 32 --repeat 1     # smoke run, seconds

Three scenarios, each repeated `--repeat` times (the median is reported), the three sides
interleaved inside every repetition so they see the same noise:

- one writer: `journal.append` of one event per call, each returning after its commit;
- 16 writers: 16 threads in this process, each appending one event per call to its own session;
  the journal side shares one `Journal` (group commit), raw psycopg has a connection per thread;
- append_many(100): one writer, 100 events per call, one transaction each.

Sides: the SQLite journal (a file in the temp dir, durability full), raw psycopg, and the
PostgreSQL journal (durability full, `synchronous_commit` as the server has it). The raw baseline
is short and plain: a table of events (identity id, session_id, seq, type, payload, created_at,
unique (session_id, seq)), one transaction per append (`BEGIN`, `INSERT … RETURNING id`,
`COMMIT`), `executemany` of 100 rows in one transaction for the batch; it checks no rules and
writes no projection. Content: the user messages of `journal_bench.py`, from a fixed seed.

Everything on PostgreSQL happens in a fresh schema with a random name (created as the `--url`
user, dropped with CASCADE at the end, also on failure or Ctrl-C).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import random
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from journal_bench import (
    Spec,
    compact_json,
    in_threads,
    new_events,
    source_fingerprint,
    user_message,
)

DEFAULT_URL = "postgresql://127.0.0.1:5432/test"
WRITERS = 16
BATCH = 100
SCENARIOS = ("one writer", f"{WRITERS} writers", f"append_many({BATCH})")
COLUMNS = (
    "scenario",
    "sqlite journal ev/s",
    "pg raw ev/s",
    "pg journal ev/s",
    "pg journal / pg raw",
)

# The raw baseline's table: what a plain application would write for an event log.
RAW_SCHEMA = """
CREATE TABLE raw_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id text NOT NULL,
    seq        bigint NOT NULL,
    type       text NOT NULL,
    payload    text NOT NULL,
    created_at bigint NOT NULL,
    UNIQUE (session_id, seq)
)
"""
RAW_INSERT = (
    "INSERT INTO raw_events (session_id, seq, type, payload, created_at)"
    " VALUES (%s, %s, %s, %s, %s) RETURNING id"
)


class _QuietSuperuser(logging.Filter):
    """The journal warns when its role bypasses row-level security; the bench says it once in its
    notes instead of once per `Journal.open`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("connected to PostgreSQL as a superuser")


# -- PostgreSQL plumbing ---------------------------------------------------------------------


def with_options(url: str, **options: str) -> str:
    """`url` with query options added (agentjournal strips its own before psycopg sees them)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *options.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def fresh_schema(url: str, prefix: str = "aj_bench_") -> Iterator[str]:
    """A new schema with a random name after `prefix`, dropped with everything in it afterwards."""
    schema = f"{prefix}{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def raw_connect(url: str, schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


class RawPostgres:
    """Plain psycopg on its own connection: one transaction per call, no rules, no projection."""

    def __init__(self, url: str, schema: str) -> None:
        self.conn = raw_connect(url, schema)
        self.last_seq: dict[str, int] = {}

    def append(self, session_id: str, type_: str, payload: dict[str, Any]) -> None:
        seq = self.last_seq.get(session_id, 0) + 1
        with self.conn.transaction():
            self.conn.execute(
                RAW_INSERT,
                (session_id, seq, type_, compact_json(payload), time.time_ns() // 1_000_000),
            ).fetchone()
        self.last_seq[session_id] = seq

    def append_many(self, session_id: str, specs: Sequence[Spec]) -> None:
        first = self.last_seq.get(session_id, 0) + 1
        now = time.time_ns() // 1_000_000
        rows = [
            (session_id, first + i, type_, compact_json(payload), now)
            for i, (type_, payload) in enumerate(specs)
        ]
        with self.conn.transaction(), self.conn.cursor() as cursor:
            cursor.executemany(RAW_INSERT, rows, returning=True)
        self.last_seq[session_id] = first + len(specs) - 1

    def close(self) -> None:
        self.conn.close()


def server_facts(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        facts = {}
        for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method"):
            found = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            facts[name] = str(found[0]) if found else "?"
        row = conn.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
    assert row is not None
    facts["user"] = str(row[0])
    facts["bypass_rls"] = "yes" if row[1] else "no"
    facts["server_version"] = facts["server_version"].split()[0]
    return facts


# -- measuring -------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Bench:
    """The three sides, open for the whole run; every repetition writes to new sessions."""

    def __init__(self, url: str, schema: str, sqlite_path: Path, events: int, seed: int) -> None:
        self.url, self.schema = url, schema
        self.events = events
        self.rng = random.Random(seed)
        self.sessions = 0
        self.sqlite = Journal.open(sqlite_path, durability="full")
        self.pg = Journal.open(with_options(url, schema=schema), durability="full")
        with raw_connect(url, schema) as conn:
            conn.execute(RAW_SCHEMA)
        self.raw = RawPostgres(url, schema)
        self.raws = [RawPostgres(url, schema) for _ in range(WRITERS)]

    def close(self) -> None:
        for raw in [self.raw, *self.raws]:
            raw.close()
        self.pg.close()
        self.sqlite.close()

    def _sid(self) -> str:
        self.sessions += 1
        return f"bench-{self.sessions}"

    def _session(self, journal: Journal) -> str:
        return journal.create_session("bench", session_id=self._sid()).session_id

    def specs(self, count: int) -> list[Spec]:
        return [user_message(self.rng) for _ in range(count)]

    # -- one writer ------------------------------------------------------------------------

    def journal_one(self, journal: Journal, specs: Sequence[Spec]) -> float:
        sid = self._session(journal)

        def run() -> None:
            for type_, payload in specs:
                journal.append(sid, type_, payload)

        return len(specs) / timed(run)

    def raw_one(self, specs: Sequence[Spec]) -> float:
        sid, raw = self._sid(), self.raw

        def run() -> None:
            for type_, payload in specs:
                raw.append(sid, type_, payload)

        return len(specs) / timed(run)

    # -- 16 writers ------------------------------------------------------------------------

    def journal_many(self, journal: Journal, each: Sequence[Sequence[Spec]]) -> float:
        def writer(sid: str, specs: Sequence[Spec]) -> Callable[[], None]:
            def run() -> None:
                for type_, payload in specs:
                    journal.append(sid, type_, payload)

            return run

        works = [writer(self._session(journal), specs) for specs in each]
        return sum(map(len, each)) / in_threads(works)

    def raw_many(self, each: Sequence[Sequence[Spec]]) -> float:
        def writer(raw: RawPostgres, sid: str, specs: Sequence[Spec]) -> Callable[[], None]:
            def run() -> None:
                for type_, payload in specs:
                    raw.append(sid, type_, payload)

            return run

        works = [
            writer(raw, self._sid(), specs) for raw, specs in zip(self.raws, each, strict=True)
        ]
        return sum(map(len, each)) / in_threads(works)

    # -- append_many(100) ------------------------------------------------------------------

    def journal_batches(self, journal: Journal, batches: Sequence[Sequence[Spec]]) -> float:
        sid = self._session(journal)
        prepared = [new_events(batch) for batch in batches]

        def run() -> None:
            for batch in prepared:
                journal.append_many(sid, batch)

        return sum(map(len, batches)) / timed(run)

    def raw_batches(self, batches: Sequence[Sequence[Spec]]) -> float:
        sid, raw = self._sid(), self.raw

        def run() -> None:
            for batch in batches:
                raw.append_many(sid, batch)

        return sum(map(len, batches)) / timed(run)

    # -- a repetition ----------------------------------------------------------------------

    def warm_up(self) -> None:
        """Connections, statement caches and the pool's first connection, on every side."""
        specs = self.specs(20)
        for journal in (self.sqlite, self.pg):
            self.journal_one(journal, specs)
            self.journal_batches(journal, [self.specs(BATCH)])
        self.raw_one(specs)
        self.raw_batches([self.specs(BATCH)])
        self.raw_many([specs[:2]] * WRITERS)
        self.journal_many(self.pg, [specs[:2]] * WRITERS)

    def once(self, scenario: str, raw_first: bool) -> tuple[float, float, float]:
        """(sqlite journal, pg raw, pg journal) events/s of one repetition of `scenario`."""
        n = self.events
        sides: list[Callable[[], float]]
        if scenario == "one writer":
            specs = self.specs(n)
            sides = [
                lambda: self.journal_one(self.sqlite, specs),
                lambda: self.raw_one(specs),
                lambda: self.journal_one(self.pg, specs),
            ]
        elif scenario == f"{WRITERS} writers":
            each = [self.specs(max(1, n // WRITERS)) for _ in range(WRITERS)]
            sides = [
                lambda: self.journal_many(self.sqlite, each),
                lambda: self.raw_many(each),
                lambda: self.journal_many(self.pg, each),
            ]
        else:
            batches = [self.specs(BATCH) for _ in range(max(1, n // BATCH))]
            sides = [
                lambda: self.journal_batches(self.sqlite, batches),
                lambda: self.raw_batches(batches),
                lambda: self.journal_batches(self.pg, batches),
            ]
        sqlite_rate = sides[0]()
        if raw_first:
            raw_rate = sides[1]()
            pg_rate = sides[2]()
        else:
            pg_rate = sides[2]()
            raw_rate = sides[1]()
        return sqlite_rate, raw_rate, pg_rate


# -- the table -------------------------------------------------------------------------------


def render(results: dict[str, list[tuple[float, float, float]]], console: Console) -> None:
    table = Table(
        title="appends/s: agentjournal on PostgreSQL vs raw psycopg, SQLite journal beside"
        " (medians)",
        title_justify="left",
    )
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for scenario, runs in results.items():
        sqlite_rate, raw_rate, pg_rate = (
            statistics.median(side) for side in zip(*runs, strict=True)
        )
        table.add_row(
            scenario,
            f"{sqlite_rate:,.0f}",
            f"{raw_rate:,.0f}",
            f"{pg_rate:,.0f}",
            f"{statistics.median(pg / raw for _, raw, pg in runs):.2f}",
        )
    console.print(table)


def spread(values: Sequence[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if low == high else f"{format(low, fmt)}–{format(high, fmt)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"PostgreSQL (default {DEFAULT_URL})")
    parser.add_argument(
        "--events", type=int, default=2000, help="events per side per repetition (default 2000)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (default 3; median)")
    parser.add_argument("--seed", type=int, default=20240601, help="content seed (default fixed)")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run only this scenario (repeatable; default all three)",
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.repeat < 1:
        parser.error("--events and --repeat must be at least 1")
    logging.getLogger("agentjournal.postgres").addFilter(_QuietSuperuser())
    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.perf_counter()
    facts = server_facts(args.url)
    load_before = os.getloadavg()[0]
    chosen = [name for name in SCENARIOS if name in (args.scenario or SCENARIOS)]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in chosen}
    with (
        tempfile.TemporaryDirectory(prefix="agentjournal-pgbench-") as workdir,
        fresh_schema(args.url) as schema,
    ):
        print(f"… schema {schema}", file=sys.stderr, flush=True)
        bench = Bench(args.url, schema, Path(workdir) / "journal.db", args.events, args.seed)
        try:
            bench.warm_up()
            for scenario in chosen:
                print(f"… {scenario}", file=sys.stderr, flush=True)
                for rep in range(args.repeat):
                    results[scenario].append(bench.once(scenario, raw_first=rep % 2 == 0))
        finally:
            bench.close()
    load_after = os.getloadavg()[0]
    console.print(
        f"{datetime.date.today()} · PostgreSQL {facts['server_version']} · psycopg"
        f" {psycopg.__version__} · SQLite {sqlite3.sqlite_version} · Python"
        f" {platform.python_version()} · {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} CPUs · {args.events:,} events × {args.repeat} · src"
        f" {source_fingerprint()} · {time.perf_counter() - started:.0f} s",
        highlight=False,
    )
    render(results, console)
    n = args.events
    notes = [
        f"machine: {os.cpu_count()} shared cores run the PostgreSQL server, SQLite and every"
        " Python thread of this bench at once; the figures move with other load on the machine"
        f" (1-minute load average {load_before:.2f} before, {load_after:.2f} after).",
        f"server: synchronous_commit={facts['synchronous_commit']}, fsync={facts['fsync']},"
        f" wal_sync_method={facts['wal_sync_method']}; both journals at durability full.",
        f"schema {schema}: created for this run and dropped at its end (CASCADE); the SQLite"
        " journal's file was in a temporary directory, removed too.",
        f"role {facts['user']}: "
        + (
            "superuser or BYPASSRLS, so the journal's row-level security policies are not"
            " evaluated (an ordinary role pays for them)."
            if facts["bypass_rls"] == "yes"
            else "an ordinary role, so row-level security applies to the journal's statements."
        ),
        f"sizes per side and repetition: one writer {n:,} appends; {WRITERS} writers"
        f" {WRITERS} × {max(1, n // WRITERS):,}; append_many({BATCH}) {max(1, n // BATCH):,}"
        " calls. Each repetition writes to new sessions; the three sides alternate within it.",
        "pg raw: psycopg, a table of events only (identity id, unique (session_id, seq)), one"
        " BEGIN/INSERT … RETURNING/COMMIT per append, a connection per writer thread,"
        f" executemany of {BATCH} rows in one transaction for the batch; no rules, no"
        " projections, no session row. pg journal: one Journal (pool, group commit).",
        "pg journal / pg raw: the median of each repetition's own ratio (the two ran back to"
        " back), so it can differ a little from the ratio of the two medians.",
    ]
    for scenario, runs in results.items():
        sqlite_rates, raw_rates, pg_rates = zip(*runs, strict=True)
        notes.append(
            f"{scenario} over {len(runs)} repetition(s): sqlite journal"
            f" {spread(sqlite_rates, ',.0f')}, pg raw {spread(raw_rates, ',.0f')}, pg journal"
            f" {spread(pg_rates, ',.0f')} ev/s; pg journal / pg raw"
            f" {spread([pg / raw for _, raw, pg in runs], '.2f')}."
        )
    for note in notes:
        console.print(f"- {note}", highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replication SQLite -> PostgreSQL: catch-up speed beside export + import of the same data, and
end-to-end lag under a steady load.

    .venv/bin/python bench/replication_bench.py                    # 1,000,000 events, 30 s of lag
    .venv/bin/python bench/replication_bench.py --events 100000    # shorter
    .venv/bin/python bench/replication_bench.py --quick            # smoke run, seconds

Catch-up: an edge journal (SQLite) holding `--events` agent-turn events over `--sessions`
sessions is replicated into an empty PostgreSQL journal (`agentjournal.replicate`, batches of
`--batch`). Beside it, the same data moved by hand: `export_lines` to a JSON Lines file, then
`import_lines` into another empty PostgreSQL journal; its events/s counts both steps.

Each side is also timed until its target is settled: `VACUUM (ANALYZE)` of every table of its
schema, run right after it. A replication commits as it goes, so the server's autovacuum visits
the growing tables during it (and slows it); an import is one transaction, and leaves that work
for after its clock stops. "Until settled" counts it on both sides.

Lag: a second, empty edge journal is appended to at `--rate` events/s (one durable append each,
round-robin over 20 sessions) for `--seconds`, while `agentjournal replicate --follow` runs in
another process, as on an edge machine; a reader of the central journal's feed polls it every
10 ms, and each event's lag is the time it was first seen there minus its append's time. p50,
p99 and max are reported.

Everything on PostgreSQL happens in fresh schemas with random names, dropped at the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from agentjournal import Journal, replicate
from agentjournal.arguments import now_ms
from agentjournal.transfer import export_lines, import_lines
from journal_bench import source_fingerprint
from postgres_bench import DEFAULT_URL, fresh_schema, with_options
from transfer_bench import write_file


def build_edge(path: Path, lines: Path, events: int, sessions: int, seed: int) -> int:
    write_file(lines, events, sessions, seed)
    with Journal.open(path, durability="normal") as edge:
        return import_lines(edge, lambda: lines.open("rb")).events


def catch_up(edge: Path, url: str, schema: str, batch: int) -> dict[str, float]:
    with Journal.open(edge) as source, Journal.open(url) as target:
        start = time.perf_counter()
        report = replicate(source, target, batch_size=batch)
        seconds = time.perf_counter() - start
        assert report.appended == report.events_read, report
    settled = seconds + settle(url, schema)
    return {"events": report.events_read, "seconds": seconds, "settled": settled}


def settle(url: str, schema: str) -> float:
    """Seconds to VACUUM (ANALYZE) every table of `schema`: the upkeep its writes left."""
    start = time.perf_counter()
    server = urlunsplit(urlsplit(url)._replace(query=""))  # without agentjournal's options
    with psycopg.connect(server, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
        ).fetchall()
        for (table,) in tables:
            conn.execute(
                sql.SQL("VACUUM (ANALYZE) {}.{}").format(*map(sql.Identifier, (schema, table)))
            )
    return time.perf_counter() - start


def export_import(edge: Path, url: str, schema: str, work: Path) -> dict[str, float]:
    lines = work / "export.jsonl"
    with Journal.open(edge) as source, Journal.open(url) as target:
        start = time.perf_counter()
        with lines.open("w", encoding="utf-8") as out:
            for line in export_lines(source):
                out.write(line + "\n")
        exported = time.perf_counter()
        report = import_lines(target, lambda: lines.open("rb"))
        seconds = time.perf_counter() - start
    settled = seconds + settle(url, schema)
    return {
        "events": report.events,
        "seconds": seconds,
        "export seconds": exported - start,
        "settled": settled,
    }


def lag(edge: Path, url: str, rate: float, seconds: float) -> dict[str, Any]:
    """Append at `rate` for `seconds` while a follower process replicates; each event's lag."""
    with Journal.open(edge) as source, Journal.open(url) as target:
        sessions = [source.create_session(f"steady {n}").session_id for n in range(20)]
        follower = subprocess.Popen(
            [sys.executable, "-m", "agentjournal.cli", "replicate", str(edge), url, "--follow"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        lags: list[int] = []
        appended = threading.Event()
        done = threading.Event()

        def read_central() -> None:
            after: str | None = None
            while True:
                page = target.events_all(after=after, limit=1000)
                now = now_ms()
                lags.extend(now - e.created_at for e in page if e.type == "user_message")
                if page:
                    after = page[-1].position
                elif appended.is_set() and len(lags) >= total:
                    done.set()
                    return
                time.sleep(0.01)

        # The load starts once the follower is up: the sessions made above have reached the
        # central journal (a replicator's start-up is not the lag of a running one).
        waited = time.perf_counter()
        while len(target.sessions(limit=50)) < len(sessions):
            if follower.poll() is not None or time.perf_counter() - waited > 60:
                raise RuntimeError(f"the follower did not start: {follower.communicate()[1]}")
            time.sleep(0.02)
        total = int(rate * seconds)
        reader = threading.Thread(target=read_central, daemon=True)
        reader.start()
        start = time.perf_counter()
        for n in range(total):
            pause = start + n / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            source.append(sessions[n % len(sessions)], "user_message", {"content": f"m{n}"})
        appended.set()
        caught_up = done.wait(120)
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
        if not caught_up:
            raise RuntimeError(f"the follower did not catch up: {err}")
    lags.sort()
    return {
        "events": len(lags),
        "p50": lags[len(lags) // 2],
        "p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
        "max": lags[-1],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"PostgreSQL (default {DEFAULT_URL})")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rate", type=float, default=200.0, help="events/s during the lag run")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the lag run")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--quick", action="store_true", help="2,000 events, 3 s of lag")
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.sessions, args.seconds, args.rate = 2000, 20, 3.0, 100.0
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        schemas = [stack.enter_context(fresh_schema(args.url)) for _ in range(3)]
        urls = [with_options(args.url, schema=schema) for schema in schemas]
        print("… building the edge journal", file=sys.stderr, flush=True)
        edge = work / "edge.db"
        build_edge(edge, work / "in.jsonl", args.events, args.sessions, args.seed)
        print("… replicating", file=sys.stderr, flush=True)
        ours = catch_up(edge, urls[0], schemas[0], args.batch)
        print("… export + import", file=sys.stderr, flush=True)
        theirs = export_import(edge, urls[1], schemas[1], work)
        print("… lag under a steady load", file=sys.stderr, flush=True)
        steady = lag(work / "steady.db", urls[2], args.rate, args.seconds)

    table = Table(
        title=f"SQLite -> PostgreSQL · {args.events:,} events in {args.sessions:,} sessions"
        f"{' · QUICK' if args.quick else ''} · {datetime.date.today()}"
        f" · Python {platform.python_version()} · {os.cpu_count()} cores"
        f" · sources {source_fingerprint()}"
    )
    columns = ("", "events", "seconds", "events/s", "× export+import")
    for column in (*columns, "until settled", "× export+import, settled"):
        table.add_column(column, justify="left" if not column else "right")
    ours_rate = ours["events"] / ours["seconds"]
    theirs_rate = theirs["events"] / theirs["seconds"]
    ours_settled = ours["events"] / ours["settled"]
    theirs_settled = theirs["events"] / theirs["settled"]
    table.add_row(
        f"replicate (batch {args.batch})",
        f"{ours['events']:,.0f}",
        f"{ours['seconds']:.1f}",
        f"{ours_rate:,.0f}",
        f"{ours_rate / theirs_rate:.2f}×",
        f"{ours['settled']:.1f} s",
        f"{ours_settled / theirs_settled:.2f}×",
    )
    table.add_row(
        f"export + import (export {theirs['export seconds']:.1f} s)",
        f"{theirs['events']:,.0f}",
        f"{theirs['seconds']:.1f}",
        f"{theirs_rate:,.0f}",
        "1.00×",
        f"{theirs['settled']:.1f} s",
        "1.00×",
    )
    console = Console(width=160)
    console.print(table)
    console.print(
        f"lag, append on the edge -> seen in the central feed, {args.rate:g} events/s for"
        f" {args.seconds:g} s ({steady['events']:,} events; replicator in its own process):"
        f" p50 {steady['p50']} ms, p99 {steady['p99']} ms, max {steady['max']} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export and import of 1,000,000 events: speed against raw `sqlite3` doing the same reads and
writes, and peak RSS (the budget: a 1,000,000-event export stays under 100 MB).

    .venv/bin/python bench/transfer_bench.py                  # 1,000,000 events
    .venv/bin/python bench/transfer_bench.py --events 20000   # smoke run, seconds

Import: `agentjournal.transfer.import_lines` reads a JSON Lines file (agent turns over
`--sessions` sessions) into an empty journal, every line through the append rules and the
projections, in one transaction. Raw: `json.loads` of each line and one `INSERT` into a table of
the same columns, in one transaction: the storage floor, without rules or projections.

Export: `export_lines` of the imported journal to a file (the whole feed, a page at a time).
Raw: one `SELECT` over `events` in id order, `json.dumps` of each row to a file. Each of the four
runs in its own process, so each peak RSS is its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from agentjournal.transfer import export_lines, import_lines
from journal_bench import peak_rss_mb, source_fingerprint
from wal_bench import turns

BUDGET_MB = 100


def write_file(path: Path, events: int, sessions: int, seed: int) -> None:
    rng = random.Random(seed)
    per_session = events // sessions
    with path.open("w", encoding="utf-8") as out:
        for n in range(sessions):
            source = turns(rng)  # a session ends mid-turn at worst; the next starts afresh
            sid = f"sess_t{n:05d}"
            session = {"session_id": sid, "seq": 1, "type": "session_created"}
            out.write(json.dumps({**session, "payload": {"title": sid}, "created_at": 1}) + "\n")
            for seq in range(2, per_session + 1):
                type_, payload = next(source)
                line = {"session_id": sid, "seq": seq, "type": type_, "payload": payload}
                out.write(json.dumps({**line, "created_at": seq}, ensure_ascii=False) + "\n")


def ours_import(lines: Path, db: Path) -> dict[str, Any]:
    with Journal.open(db, durability="normal") as journal:
        start = time.perf_counter()
        report = import_lines(journal, lambda: lines.open("rb"))
        elapsed = time.perf_counter() - start
    return {"events": report.events, "seconds": elapsed, "rss": peak_rss_mb()}


def raw_import(lines: Path, db: Path) -> dict[str, Any]:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE events (event_id INTEGER PRIMARY KEY, session_id TEXT, seq INTEGER,"
        " type TEXT, payload TEXT, idempotency_key TEXT, created_at INTEGER,"
        " UNIQUE (session_id, seq))"
    )
    start = time.perf_counter()
    conn.execute("BEGIN")
    count = 0
    insert = (
        "INSERT INTO events (session_id, seq, type, payload, idempotency_key, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)"
    )
    with lines.open("rb") as source:
        for text in source:
            event = json.loads(text)
            payload = json.dumps(event["payload"], ensure_ascii=False, separators=(",", ":"))
            conn.execute(
                insert,
                (
                    event["session_id"],
                    event["seq"],
                    event["type"],
                    payload,
                    None,
                    event["created_at"],
                ),
            )
            count += 1
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return {"events": count, "seconds": elapsed, "rss": peak_rss_mb()}


def ours_export(db: Path, out: Path) -> dict[str, Any]:
    with Journal.open(db) as journal, out.open("w", encoding="utf-8") as file:
        start = time.perf_counter()
        count = 0
        for line in export_lines(journal):
            file.write(line + "\n")
            count += 1
        elapsed = time.perf_counter() - start
    return {"events": count, "seconds": elapsed, "rss": peak_rss_mb()}


def raw_export(db: Path, out: Path) -> dict[str, Any]:
    conn = sqlite3.connect(db)
    start = time.perf_counter()
    count = 0
    with out.open("w", encoding="utf-8") as file:
        rows = conn.execute(
            "SELECT event_id, session_id, seq, type, payload, idempotency_key, created_at"
            " FROM events ORDER BY event_id"
        )
        for event_id, sid, seq, type_, payload, key, created in rows:
            event = {
                "event_id": event_id,
                "session_id": sid,
                "seq": seq,
                "position": str(event_id),
                "type": type_,
                "payload": json.loads(payload),
                "idempotency_key": key,
                "created_at": created,
            }
            file.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
            count += 1
    elapsed = time.perf_counter() - start
    conn.close()
    return {"events": count, "seconds": elapsed, "rss": peak_rss_mb()}


def in_process(fn: Any, *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1) as pool:
        result: dict[str, Any] = pool.submit(fn, *args).result()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aj-transfer-") as tmp:
        work = Path(tmp)
        lines = work / "in.jsonl"
        write_file(lines, args.events, args.sessions, args.seed)
        size_mb = lines.stat().st_size / 2**20
        rows = []
        ours = in_process(ours_import, lines, work / "ours.db")
        raw = in_process(raw_import, lines, work / "raw.db")
        rows.append(("import", ours, raw))
        ours = in_process(ours_export, work / "ours.db", work / "ours.jsonl")
        raw = in_process(raw_export, work / "raw.db", work / "raw.jsonl")
        rows.append(("export", ours, raw))

    table = Table(
        title=f"{args.events:,} events in {args.sessions:,} sessions ({size_mb:,.0f} MB of JSON"
        f" Lines) · {datetime.date.today()} · Python {platform.python_version()}"
        f" · SQLite {sqlite3.sqlite_version} · {os.cpu_count()} cores"
        f" · sources {source_fingerprint()}"
    )
    for column in ("", "agentjournal events/s", "raw events/s", "× raw", "peak RSS", "raw RSS"):
        table.add_column(column, justify="left" if not column else "right")
    for name, ours, raw in rows:
        ours_rate, raw_rate = ours["events"] / ours["seconds"], raw["events"] / raw["seconds"]
        rss = f"{ours['rss']:,.0f} MB"
        if name == "export":
            rss += f" (budget {BUDGET_MB} MB)"
        table.add_row(
            name,
            f"{ours_rate:,.0f}",
            f"{raw_rate:,.0f}",
            f"{ours_rate / raw_rate:.2f}×",
            rss,
            f"{raw['rss']:,.0f} MB",
        )
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

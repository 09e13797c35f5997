"""Where the time of one agent-turn append goes on SQLite: the write path taken apart.

    .venv/bin/python bench/write_anatomy.py            # 1,000 turns per durability (about 30 s)
    .venv/bin/python bench/write_anatomy.py --quick    # 150 turns (a smoke run)

One turn is the workload of the write-path issue: a user message, a tool call, its result and an
assistant message (~200 characters each, a third of them Chinese) as one `append_many`, durable
at return. Three writers grow their own file side by side, turn by turn, interleaved:

- **agentjournal**: `Journal.append_many`, with validation, rules and projections;
- **same SQL, raw**: the statements agentjournal's SQLite backend issues for that turn, on a file
  with agentjournal's schema, from a plain `sqlite3` connection: the floor of the SQL alone;
- **4 raw INSERTs**: one table (id, session, seq, type, payload), one transaction.

Each figure is the median of the turns after the first fifth (so every file is past its first
pages). Then 20 more agentjournal turns are written, each after a WAL checkpoint, and the WAL's
frames are read back and named by b-tree (`dbstat`): the pages a commit writes, and at `full`
fsyncs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentjournal import Journal
from workload import turn_events


def turn(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return turn_events(n, rng.randrange(2**32))


def connect(path: Path, durability: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {durability.upper()}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class SameSQL:
    """agentjournal's statements for one turn (the SQLite backend's, read from a trace), raw."""

    @classmethod
    def at(cls, path: Path, durability: str) -> tuple[SameSQL, Path]:
        return cls(path, durability), path

    def __init__(self, path: Path, durability: str) -> None:
        Journal.open(str(path), durability=durability).create_session(session_id="s")
        self.conn = connect(path, durability)
        self.conn.execute("PRAGMA secure_delete = ON")
        self.seq = 1

    def __call__(self, events: list[dict[str, Any]]) -> None:
        execute, seq = self.conn.execute, self.seq
        call = events[1]["payload"]["call_id"]
        execute("BEGIN IMMEDIATE")
        execute(
            "SELECT status, last_seq FROM sessions WHERE session_id = ? AND tenant = ?",
            ("s", "default"),
        ).fetchall()
        execute(
            "SELECT status FROM tool_calls WHERE session_id = ? AND tenant = ? AND call_id = ?",
            ("s", "default", call),
        ).fetchall()
        ids = []
        for offset, event in enumerate(events, start=1):
            ids.append(
                execute(
                    "INSERT INTO events (tenant, session_id, seq, type, payload, idempotency_key,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    ("default", "s", seq + offset, event["type"], _json(event["payload"]), None, 1),
                ).lastrowid
            )
        self.conn.executemany(
            "INSERT INTO messages (session_id, tenant, seq, tokens, content_id)"
            " VALUES (?, ?, ?, ?, ?)",
            [("s", "default", seq + 1, 50, ids[0]), ("s", "default", seq + 4, 50, ids[3])],
        )
        self.conn.executemany(
            "INSERT INTO tool_calls (session_id, tenant, call_id, call_seq, status, result_seq)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [("s", "default", call, seq + 2, "ok", seq + 3)],
        )
        self.conn.executemany(
            "UPDATE sessions SET last_seq = ?, last_event_id = ?, event_count = event_count + ?,"
            " updated_at = ?, turn_open = coalesce(?, turn_open),"
            " prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?"
            " WHERE session_id = ? AND tenant = ?",
            [(seq + 4, ids[3], 4, 1, False, 0, 0, "s", "default")],
        )
        execute("COMMIT")
        self.seq += 4


class FourInserts:
    @classmethod
    def at(cls, path: Path, durability: str) -> tuple[FourInserts, Path]:
        return cls(path, durability), path

    def __init__(self, path: Path, durability: str) -> None:
        self.conn = connect(path, durability)
        self.conn.execute(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, session TEXT, seq INTEGER,"
            " type TEXT, payload TEXT)"
        )
        self.seq = 0

    def __call__(self, events: list[dict[str, Any]]) -> None:
        rows = [
            ("s", self.seq + i, e["type"], _json(e["payload"])) for i, e in enumerate(events, 1)
        ]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO items (session, seq, type, payload) VALUES (?, ?, ?, ?)", rows
        )
        self.conn.execute("COMMIT")
        self.seq += 4


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def wal_frames(path: Path) -> list[int]:
    """The page numbers of the valid frames in `path`'s WAL (those with the header's salts)."""
    data = (path.parent / (path.name + "-wal")).read_bytes()
    salts, pages, offset = data[16:24], [], 32
    while offset + 24 <= len(data) and data[offset + 8 : offset + 16] == salts:
        pages.append(struct.unpack(">I", data[offset : offset + 4])[0])
        offset += 24 + 4096
    return pages


def pages_per_commit(
    write: Callable[[list[dict[str, Any]]], Any], path: Path, rng: random.Random, commits: int = 20
) -> float:
    """The pages a turn's commit writes (the mean of `commits` turns, each written alone into an
    emptied WAL); by b-tree in `_by_tree` (named by `dbstat`)."""
    raw = sqlite3.connect(path, isolation_level=None)
    tally: collections.Counter[str] = collections.Counter()
    for n in range(commits):
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        write(turn(rng, 10**6 + n))
        names = dict(raw.execute("SELECT pageno, name FROM dbstat"))
        tally.update(names.get(page, "?") for page in wal_frames(path))
    raw.close()
    _by_tree[path] = {name: count / commits for name, count in tally.most_common()}
    return sum(tally.values()) / commits


_by_tree: dict[Path, dict[str, float]] = {}


def measure(durability: str, turns: int, directory: Path) -> None:
    rng = random.Random(20261203)
    aj_path = directory / f"agentjournal-{durability}.db"
    journal = Journal.open(str(aj_path), durability=durability)
    journal.create_session(session_id="s")
    writers: dict[str, tuple[Callable[[list[dict[str, Any]]], Any], Path]] = {
        "agentjournal": (lambda events: journal.append_many("s", events), aj_path),
        "same SQL, raw": SameSQL.at(directory / f"same-sql-{durability}.db", durability),
        "4 raw INSERTs": FourInserts.at(directory / f"four-{durability}.db", durability),
    }
    times: dict[str, list[float]] = {name: [] for name in writers}
    for n in range(turns):
        events = turn(rng, n)
        for name, (write, _) in writers.items():
            start = time.perf_counter()
            write(events)
            times[name].append(time.perf_counter() - start)
    floor = statistics.median(times["4 raw INSERTs"][turns // 5 :])
    print(f"\n{durability}: median per 4-event turn over turns {turns // 5 + 1}-{turns}")
    for name, (write, path) in writers.items():
        median = statistics.median(times[name][turns // 5 :])
        pages = pages_per_commit(write, path, rng)
        print(
            f"  {name:<14} {median * 1e6:7.0f} µs  {median / floor:5.2f}× 4 raw INSERTs"
            f"  {pages:5.1f} pages per commit"
        )
    journal.close()
    listed = ", ".join(f"{name} {count:.2g}" for name, count in _by_tree[aj_path].items())
    print(f"  agentjournal's pages by b-tree: {listed}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="150 turns, for a smoke run")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    print(
        f"Python {sys.version.split()[0]} · SQLite {sqlite3.sqlite_version} · {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for durability in ("full", "normal"):
            measure(durability, 150 if args.quick else 1_000, Path(directory))


if __name__ == "__main__":
    main()

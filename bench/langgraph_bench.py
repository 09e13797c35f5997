"""`JournalSaver` (agentjournal as LangGraph's checkpointer) beside LangGraph's own
`SqliteSaver` and `PostgresSaver`, on the same machine in the same run, with the same graph and
the same messages.

    .venv/bin/python bench/langgraph_bench.py            # the full run (10, 100, 1,000 turns)
    .venv/bin/python bench/langgraph_bench.py --quick    # a smoke run (5 and 20 turns)

The graph is the one-node chat graph of LangGraph's tutorials: `MessagesState`, one node that
answers every user message with one assistant message (no model: a fixed reply, so the figures are
the checkpointer's). Each turn is one `invoke` with one user message of ~200 characters (a third of
them Chinese, from a fixed seed); the reply is ~200 characters too. Every `invoke` is timed; the
figure at N turns is the median over the turns just before N (the last N/2, at most 50). At N
turns the bytes the thread takes on disk are read (SQLite: the database file and its WAL after a
checkpoint; PostgreSQL: `pg_total_relation_size` of every table in the run's schema), and
`get_state` is timed (median of 7 calls, after one untimed call that checks it holds 2N messages).

Each saver runs in a fresh process (multiprocessing `spawn`), one after the other: they share no
connection, cache or Python state. SQLite savers use a file in a temporary directory under
`--dir`; PostgreSQL savers a fresh schema on `--url` (default postgresql://127.0.0.1:5432/test;
skipped with a note if it cannot be reached). `JournalSaver` runs at the journal's default
`durability="full"`; `SqliteSaver` and `PostgresSaver` as they come. Peak RSS is each process's
`ru_maxrss`. Ratio = JournalSaver / the LangGraph saver on the same backend. The targets (issue
15) are against `SqliteSaver`: bytes at the largest size at most 1/50, per-turn time below, and
flat in the thread's length; the PostgreSQL pair is shown beside it without targets.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import multiprocessing
import os
import platform
import random
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

BYTES_TARGET = 50.0  # the LangGraph saver's bytes / JournalSaver's, at the largest size
WINDOW_CAP = 50
SAVERS = ("JournalSaver", "SqliteSaver", "JournalSaver (PostgreSQL)", "PostgresSaver")
ON_POSTGRES = {"JournalSaver (PostgreSQL)", "PostgresSaver"}
BASELINE = {"JournalSaver": "SqliteSaver", "JournalSaver (PostgreSQL)": "PostgresSaver"}
TARGETED = {"JournalSaver"}  # issue 15's targets are against SqliteSaver; PostgreSQL is shown


def text(rng: random.Random, size: int = 200) -> str:
    words = ["订单", "查询", "数量", "status", "order", "the", "shipping", "地址", "refund", "42"]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(words))
    return " ".join(out)[:size]


def build_graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    rng = random.Random(7)

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(text(rng))]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def with_options(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | options
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def open_saver(name: str, where: str) -> Iterator[tuple[Any, Any]]:
    """The saver, and a function giving the bytes its data takes now."""
    if name == "JournalSaver":
        from agentjournal.integrations.langgraph import JournalSaver

        path = os.path.join(where, "journal.db")
        with JournalSaver.from_conn_string(path) as saver:
            yield saver, lambda: sqlite_bytes(path, saver.journal.storage.checkpoint)
    elif name == "SqliteSaver":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(where, "sqlitesaver.db")
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver, lambda: sqlite_bytes(path, lambda: conn.execute("PRAGMA wal_checkpoint"))
        finally:
            conn.close()
    elif name == "JournalSaver (PostgreSQL)":
        from agentjournal.integrations.langgraph import JournalSaver

        with (
            fresh_schema(where) as schema,
            JournalSaver.from_conn_string(with_options(where, schema=schema)) as saver,
        ):
            yield saver, lambda: postgres_bytes(where, schema)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with fresh_schema(where) as schema:
            url = with_options(where, options=f"-csearch_path={schema}")
            with PostgresSaver.from_conn_string(url) as saver:
                saver.setup()
                yield saver, lambda: postgres_bytes(where, schema)


def sqlite_bytes(path: str, checkpoint: Any) -> int:
    checkpoint()
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    import psycopg

    schema = f"lg_bench_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def postgres_bytes(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def run_saver(name: str, where: str, sizes: tuple[int, ...]) -> dict[str, Any]:
    """One saver in its own process: the figures at each size."""
    from langchain_core.messages import HumanMessage

    rng = random.Random(42)
    config = {"configurable": {"thread_id": "user-42"}}
    figures: dict[str, Any] = {}
    with open_saver(name, where) as (saver, size_on_disk):
        graph = build_graph(saver)
        times: list[float] = []
        for turn in range(1, max(sizes) + 1):
            message = HumanMessage(text(rng))
            started = time.perf_counter()
            graph.invoke({"messages": [message]}, config)
            times.append(time.perf_counter() - started)
            if turn not in sizes:
                continue
            window = times[-min(WINDOW_CAP, max(1, turn // 2)) :]
            figures[f"turn@{turn}"] = statistics.median(window)
            figures[f"bytes@{turn}"] = size_on_disk()
            state = graph.get_state(config)
            assert len(state.values["messages"]) == 2 * turn, name
            timed = []
            for _ in range(7):
                started = time.perf_counter()
                graph.get_state(config)
                timed.append(time.perf_counter() - started)
            figures[f"get_state@{turn}"] = statistics.median(timed)
    figures["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return figures


def postgres_reachable(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def fmt_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return str(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 and 20 turns")
    parser.add_argument("--dir", default=None, help="where the SQLite files go (a temp dir)")
    parser.add_argument("--url", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    sizes = (5, 20) if args.quick else (10, 100, 1000)
    problem = postgres_reachable(args.url)
    names = [n for n in SAVERS if problem is None or n not in ON_POSTGRES]
    print(f"# LangGraph checkpointers{' (QUICK: sizes 5 and 20)' if args.quick else ''}")
    versions = " · ".join(
        f"{package} {importlib.metadata.version(package)}"
        for package in ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres")
    )
    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC · Python"
        f" {platform.python_version()} · {os.cpu_count()} CPUs · {versions}"
    )
    if problem is not None:
        print(f"PostgreSQL skipped: {problem}")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        context = multiprocessing.get_context("spawn")
        for name in names:
            where = args.url if name in ON_POSTGRES else tmp
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                results[name] = pool.submit(run_saver, name, where, sizes).result()
    for ours, theirs in BASELINE.items():
        if ours not in results:
            continue
        print()
        print(f"| measure | {ours} | {theirs} | ratio | target | met? |")
        print("| --- | --- | --- | --- | --- | --- |")
        a, b = results[ours], results[theirs]
        for size in sizes:
            ratio = a[f"turn@{size}"] / b[f"turn@{size}"]
            target, met = "", ""
            if size == sizes[-1] and ours in TARGETED:
                target, met = "ratio < 1", "yes" if ratio < 1 else "NO"
            print(
                f"| invoke (1 turn) @{size} turns | {fmt_time(a[f'turn@{size}'])} |"
                f" {fmt_time(b[f'turn@{size}'])} | {ratio:.2f} | {target} | {met} |"
            )
        for size in sizes:
            ratio = a[f"bytes@{size}"] / b[f"bytes@{size}"]
            target, met = "", ""
            if size == sizes[-1] and ours in TARGETED:
                target = f"ratio ≤ 1/{BYTES_TARGET:.0f}"
                met = "yes" if ratio <= 1 / BYTES_TARGET else "NO"
            print(
                f"| bytes on disk @{size} turns | {fmt_bytes(a[f'bytes@{size}'])} |"
                f" {fmt_bytes(b[f'bytes@{size}'])} | {ratio:.3f} | {target} | {met} |"
            )
        for size in sizes:
            ratio = a[f"get_state@{size}"] / b[f"get_state@{size}"]
            print(
                f"| get_state @{size} turns | {fmt_time(a[f'get_state@{size}'])} |"
                f" {fmt_time(b[f'get_state@{size}'])} | {ratio:.2f} | | |"
            )
        flat = a[f"turn@{sizes[-1]}"] / a[f"turn@{sizes[0]}"]
        target, met = "", ""
        if ours in TARGETED:
            target, met = "flat (≤ 1.5)", "yes" if flat <= 1.5 else "NO"
        name = f"{ours} invoke @{sizes[-1]} / @{sizes[0]} turns"
        print(f"| {name} | {flat:.2f} | | | {target} | {met} |")
        print(
            f"| peak RSS | {fmt_bytes(a['rss'])} | {fmt_bytes(b['rss'])} |"
            f" {a['rss'] / b['rss']:.2f} | | |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Many conversations at once in one asyncio process: `JournalSession` against the OpenAI Agents
SDK's own `SQLiteSession`, on one SQLite file each, in the same run.

    .venv/bin/python bench/agents_concurrency_bench.py            # the full run (a few minutes)
    .venv/bin/python bench/agents_concurrency_bench.py --quick    # a smoke run

`--conversations` conversations (default 16) run together under `asyncio.gather`, each adding
`--turns` turns (default 100) with the SDK's own call, `await session.add_items(items)`, 4 items a
turn (a user message, a `function_call`, its output, an assistant message; the same items for
every system, from a fixed seed). Durable at return: JournalSession at `durability="full"`,
SQLiteSession as it comes (WAL; the run prints its `synchronous`).

Three ways to hold the conversations:
- `SQLiteSession`: one `SQLiteSession(id, path)` per conversation, all on one file.
- `JournalSession, shared journal`: one `AsyncJournal` for the file, one `JournalSession` per
  conversation over it.
- `JournalSession.open`: `JournalSession.open(path, id)` per conversation, as a user who swaps
  the class name writes it (every open of one file in a process shares its writer).

A figure is turns per second over the whole run (all conversations' turns / the time from the
first add to the last), and the median and 99th percentile of one `add_items`. Each system runs
in a fresh process (multiprocessing `spawn`), rounds alternate the order, and a figure is the
median of the rounds'. Ratio: JournalSession / SQLiteSession (turns/s: higher is better).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import multiprocessing
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from workload import turn_items

SYSTEMS = ("SQLiteSession", "JournalSession, shared journal", "JournalSession.open")
TARGET = 1.0  # turns/s: JournalSession / SQLiteSession, both ways of holding the journal


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_system(
    system: str, workdir: str, conversations: int, turns: int, seed: int
) -> dict[str, Any]:
    return asyncio.run(_run(system, Path(workdir), conversations, turns, seed))


async def _run(
    system: str, workdir: Path, conversations: int, turns: int, seed: int
) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    path = workdir / "conversations.db"
    ids = [f"user-{i}" for i in range(conversations)]
    sessions: list[Any]
    journal: Any = None
    if system == "SQLiteSession":
        from agents import SQLiteSession

        sessions = [SQLiteSession(sid, path) for sid in ids]
    else:
        from agentjournal import AsyncJournal
        from agentjournal.integrations.openai_agents import JournalSession

        if system == "JournalSession.open":
            sessions = [JournalSession.open(str(path), sid) for sid in ids]
        else:
            journal = await AsyncJournal.open(str(path))
            sessions = [JournalSession(sid, journal) for sid in ids]
    items = [turn_items(n, seed) for n in range(1, turns + 1)]
    latencies: list[float] = []

    async def converse(session: Any) -> None:
        for turn in items:
            start = time.perf_counter()
            await session.add_items(turn)
            latencies.append(time.perf_counter() - start)

    try:
        start = time.perf_counter()
        await asyncio.gather(*(converse(session) for session in sessions))
        elapsed = time.perf_counter() - start
        # Untimed: every conversation holds exactly its own turns.
        expected = [item for turn in items for item in turn]
        for session in sessions:
            if await session.get_items() != expected:
                raise AssertionError(f"{system}: a conversation does not hold what it added")
    finally:
        for session in sessions:
            session.close()
        if journal is not None:
            await journal.close()
    return {
        "turns_per_s": conversations * turns / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_fresh_process(*args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        result: dict[str, Any] = pool.submit(run_system, *args).result()
    return result


def render(rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    def median(system: str, field: str) -> float:
        return statistics.median(r[field] for r in rounds[system])

    base = median("SQLiteSession", "turns_per_s")
    lines = [
        "| system | turns/s | ratio | target | met? | add_items p50 ms | p99 ms | peak RSS MB |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for system in SYSTEMS:
        rate = median(system, "turns_per_s")
        ratio = rate / base
        is_peer = system == "SQLiteSession"
        lines.append(
            f"| {system} | {rate:,.0f} | {ratio:.2f}x | {'' if is_peer else f'≥ {TARGET:.1f}x'}"
            f" | {'' if is_peer else ('yes' if ratio >= TARGET else 'no')}"
            f" | {median(system, 'p50_ms'):.2f} | {median(system, 'p99_ms'):.2f}"
            f" | {median(system, 'rss_mb'):.0f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 x 10 turns, 1 round")
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=100, help="turns per conversation")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--dir", help="where the temporary databases go (default: the temp dir)")
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations, args.turns, args.rounds = 4, 10, 1
    if min(args.conversations, args.turns, args.rounds) < 1:
        parser.error("--conversations, --turns and --rounds must be at least 1")
    rounds: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="aj-concurrency-") as scratch:
        for number in range(args.rounds):
            order = SYSTEMS if number % 2 == 0 else SYSTEMS[::-1]
            for index, system in enumerate(order):
                workdir = Path(scratch) / f"round{number}-{index}"
                rounds[system].append(
                    in_fresh_process(
                        system, str(workdir), args.conversations, args.turns, args.seed
                    )
                )
    with sqlite3.connect(":memory:") as probe:
        synchronous = probe.execute("PRAGMA synchronous").fetchone()[0]
    print(
        f"# {args.conversations} conversations x {args.turns} turns at once, one asyncio process"
        f"{' (QUICK: a smoke run, not a measurement)' if args.quick else ''}"
    )
    print(
        f"# {datetime.date.today()} · Python {platform.python_version()} · SQLite"
        f" {sqlite3.sqlite_version} (default synchronous={synchronous}) · openai-agents"
        f" {importlib.metadata.version('openai-agents')} · medians of {args.rounds} rounds"
    )
    print()
    print("\n".join(render(rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`JournalSession` on PostgreSQL beside the OpenAI Agents SDK's own `SQLAlchemySession` on the
same server, in the same run: one conversation, then 16 at once.

    .venv/bin/python bench/agents_postgres_bench.py            # the full run (3-4 minutes)
    .venv/bin/python bench/agents_postgres_bench.py --quick    # a smoke run (seconds of work)

Three systems, each given the same turns with the SDK's own call, `await session.add_items(items)`,
4 items a turn (a user message, a `function_call`, its output, an assistant message; ~200
characters of text each, a third of them Chinese, from a fixed seed: bench/workload.py):

- `SQLAlchemySession`: the SDK's extension (`agents.extensions.memory`) on an engine of
  `create_async_engine("postgresql+psycopg://…")`, psycopg 3's async driver, with SQLAlchemy's
  default pool; its tables created as the SDK documents (`create_tables=True`, by one session
  before the clock starts), then `SQLAlchemySession(id, engine=engine)` per conversation.
- `JournalSession, shared journal`: one `AsyncJournal.open(url)`, `JournalSession(id, journal)`
  per conversation.
- `JournalSession.open`: `JournalSession.open(url, id)` per conversation, as docs/integrations.md
  shows first.

Durable at return: JournalSession at `durability="full"`, SQLAlchemySession as the server commits
(the run prints its `synchronous_commit`). Each system, in each workload, writes to a fresh schema
of its own on `--url` (created before, dropped with CASCADE after, also on failure), so none sees
another's rows.

Workloads:
- one conversation grows turn by turn to 1,000 turns; every `add_items` is timed, and the figures
  at N turns are the median and 99th percentile over the window of turns just before N (turns
  2-10 for 10, the last N/2 capped at 100 above that; turn 1 creates the session), as in
  agents_session_bench.py. Ratio = JournalSession / SQLAlchemySession (time: lower is better).
- `--conversations` (16) conversations of `--turns` (100) turns at once under `asyncio.gather` in
  one process, as in agents_concurrency_bench.py: turns per second over the whole run, and the
  median and 99th percentile of one `add_items`. Ratio = JournalSession / SQLAlchemySession
  (turns/s: higher is better).

After each workload, untimed, every conversation's `get_items()` must return exactly what was added.
Each system runs each round in a fresh process (multiprocessing `spawn`), rounds alternate the
order, and a figure is the median of the rounds'.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import logging
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

import postgres_bench
from postgres_bench import DEFAULT_URL
from workload import turn_items

PEER = "SQLAlchemySession"
SYSTEMS = (PEER, "JournalSession, shared journal", "JournalSession.open")
TARGET = 1.0  # JournalSession against SQLAlchemySession: p50 time ratio ≤, turns/s ratio ≥
WINDOW_CAP = 100  # most turns timed in an add_items window


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # one conversation: lengths in turns at which figures are taken
    conversations: int  # at once
    turns: int  # per conversation, at once


FULL = Plan(sizes=(10, 100, 1000), conversations=16, turns=100)
QUICK = Plan(sizes=(10, 50), conversations=4, turns=10)


def window(size: int) -> range:
    """The turns whose add_items make the figures at `size` turns (turn 1 creates the session)."""
    if size <= 10:
        return range(2, size + 1)
    return range(size - min(size // 2, WINDOW_CAP) + 1, size + 1)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> float:
    return seconds * 1000


# -- PostgreSQL plumbing ---------------------------------------------------------------------


def with_options(url: str, **options: str) -> str:
    """`url` with query options added (agentjournal strips its own before psycopg sees them)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *options.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def sqlalchemy_url(url: str) -> str:
    """`url` for SQLAlchemy's psycopg 3 dialect (async with create_async_engine)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql+psycopg"))


def fresh_schema(url: str) -> AbstractContextManager[str]:
    """A new schema, dropped with everything in it afterwards; named `aj_agents_…`, which the
    smoke test looks for."""
    return postgres_bench.fresh_schema(url, prefix="aj_agents_")


def server_facts(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        facts = {}
        for name in ("server_version", "synchronous_commit", "fsync"):
            found = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            facts[name] = str(found[0]).split()[0] if found else "?"
        row = conn.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
    assert row is not None
    facts["user"], facts["bypass_rls"] = str(row[0]), "yes" if row[1] else "no"
    return facts


class _QuietSuperuser(logging.Filter):
    """The journal warns when its role bypasses row-level security; the bench says it once in its
    notes instead of once per `Journal.open`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("connected to PostgreSQL as a superuser")


# -- one system, one workload, in a fresh process ---------------------------------------------


class Sessions:
    """The sessions of one system in one schema, and how to close them all."""

    def __init__(self, system: str, url: str, schema: str) -> None:
        self.system, self.url, self.schema = system, url, schema
        self.engine: Any = None
        self.journal: Any = None

    async def make(self, ids: Sequence[str]) -> list[Any]:
        if self.system == PEER:
            from agents.extensions.memory import SQLAlchemySession
            from sqlalchemy.ext.asyncio import create_async_engine

            self.engine = create_async_engine(
                sqlalchemy_url(self.url),
                connect_args={"options": f"-csearch_path={self.schema}"},
            )
            # The tables, as the SDK documents it (create_tables=True), before the clock starts.
            await SQLAlchemySession("setup", engine=self.engine, create_tables=True).get_items()
            return [SQLAlchemySession(sid, engine=self.engine) for sid in ids]
        from agentjournal import AsyncJournal
        from agentjournal.integrations.openai_agents import JournalSession

        url = with_options(self.url, schema=self.schema)
        if self.system == "JournalSession.open":
            return [JournalSession.open(url, sid) for sid in ids]
        self.journal = await AsyncJournal.open(url)
        return [JournalSession(sid, self.journal) for sid in ids]

    async def close(self, sessions: Sequence[Any]) -> None:
        for session in sessions:
            if self.system != PEER:
                session.close()
        if self.journal is not None:
            await self.journal.close()
        if self.engine is not None:
            await self.engine.dispose()


def run_system(
    system: str, url: str, schemas: Sequence[str], plan: Plan, seed: int
) -> dict[str, Any]:
    logging.getLogger("agentjournal.postgres").addFilter(_QuietSuperuser())
    return asyncio.run(_run_system(system, url, schemas, plan, seed))


async def _run_system(
    system: str, url: str, schemas: Sequence[str], plan: Plan, seed: int
) -> dict[str, Any]:
    one, many = schemas
    return {
        "one": await _one(system, url, one, plan, seed),
        "many": await _many(system, url, many, plan, seed),
    }


async def _one(
    system: str, url: str, schema: str, plan: Plan, seed: int
) -> dict[int, tuple[float, float]]:
    """One conversation: (p50, p99) ms of add_items over each size's window."""
    holder = Sessions(system, url, schema)
    sessions = await holder.make(["user-42"])
    (session,) = sessions
    added: list[Any] = []
    times: list[float] = []  # times[n - 1] is turn n's
    found: dict[int, tuple[float, float]] = {}
    try:
        for n in range(1, max(plan.sizes) + 1):
            items = turn_items(n, seed)
            start = time.perf_counter()
            await session.add_items(items)
            times.append(time.perf_counter() - start)
            added += items
            if n in plan.sizes:
                timed = [times[t - 1] for t in window(n)]
                found[n] = (ms(statistics.median(timed)), ms(percentile(timed, 0.99)))
        if await session.get_items() != added:
            raise AssertionError(f"{system}: get_items differs from the items added")
    finally:
        await holder.close(sessions)
    return found


async def _many(system: str, url: str, schema: str, plan: Plan, seed: int) -> dict[str, float]:
    """`plan.conversations` at once: turns/s, p50 and p99 ms of one add_items."""
    holder = Sessions(system, url, schema)
    sessions = await holder.make([f"user-{i}" for i in range(plan.conversations)])
    items = [turn_items(n, seed) for n in range(1, plan.turns + 1)]
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
        expected = [item for turn in items for item in turn]
        for session in sessions:
            if await session.get_items() != expected:
                raise AssertionError(f"{system}: a conversation does not hold what it added")
    finally:
        await holder.close(sessions)
    return {
        "turns_per_s": plan.conversations * plan.turns / elapsed,
        "p50_ms": ms(statistics.median(latencies)),
        "p99_ms": ms(percentile(latencies, 0.99)),
    }


def in_fresh_process(*args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        result: dict[str, Any] = pool.submit(run_system, *args).result()
    return result


# -- the tables -------------------------------------------------------------------------------


def render_one(plan: Plan, rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    def med(system: str, size: int, which: int) -> float:
        return statistics.median(r["one"][size][which] for r in rounds[system])

    lines = [
        "| system | turns | add_items p50 ms | ratio | p99 ms | ratio | target | met? |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for size in plan.sizes:
        base50, base99 = med(PEER, size, 0), med(PEER, size, 1)
        for system in SYSTEMS:
            p50, p99 = med(system, size, 0), med(system, size, 1)
            if system == PEER:
                lines.append(f"| {system} | {size:,} | {p50:.3f} | | {p99:.3f} | | | |")
                continue
            ratio = p50 / base50
            met = "yes" if ratio <= TARGET else "NO"
            lines.append(
                f"| {system} | {size:,} | {p50:.3f} | {ratio:.2f} | {p99:.3f}"
                f" | {p99 / base99:.2f} | p50 ratio ≤ {TARGET:.1f} | {met} |"
            )
    return lines


def render_many(rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    def med(system: str, field: str) -> float:
        return statistics.median(r["many"][field] for r in rounds[system])

    base = med(PEER, "turns_per_s")
    lines = [
        "| system | turns/s | ratio | target | met? | add_items p50 ms | p99 ms |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for system in SYSTEMS:
        rate = med(system, "turns_per_s")
        ratio = rate / base
        is_peer = system == PEER
        lines.append(
            f"| {system} | {rate:,.0f} | {ratio:.2f}x | {'' if is_peer else f'≥ {TARGET:.1f}x'}"
            f" | {'' if is_peer else ('yes' if ratio >= TARGET else 'NO')}"
            f" | {med(system, 'p50_ms'):.2f} | {med(system, 'p99_ms'):.2f} |"
        )
    return lines


def spans(plan: Plan, rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each JournalSession's ratios, lowest–highest over the rounds (paired round by round)."""
    lines = []
    for system in SYSTEMS[1:]:
        pairs = list(zip(rounds[system], rounds[PEER], strict=True))
        ones = []
        for size in plan.sizes:
            ratios = sorted(ours["one"][size][0] / peer["one"][size][0] for ours, peer in pairs)
            ones.append(f"@{size:,} {ratios[0]:.2f}–{ratios[-1]:.2f}")
        rates = sorted(
            ours["many"]["turns_per_s"] / peer["many"]["turns_per_s"] for ours, peer in pairs
        )
        lines.append(
            f"- {system}, each round's ratio, lowest–highest of {len(pairs)}: one conversation"
            f" p50 {'; '.join(ones)}; at once turns/s {rates[0]:.2f}–{rates[-1]:.2f}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"PostgreSQL (default {DEFAULT_URL})")
    parser.add_argument("--quick", action="store_true", help="a smoke run: sizes 10, 50; 4 x 10")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every system (default 3)")
    parser.add_argument("--conversations", type=int, help="at once (default 16; --quick 4)")
    parser.add_argument("--turns", type=int, help="turns per conversation at once (default 100)")
    parser.add_argument("--seed", type=int, default=20261203, help="content seed (default fixed)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.quick:
        args.rounds = 1
    plan = Plan(plan.sizes, args.conversations or plan.conversations, args.turns or plan.turns)
    if min(plan.conversations, plan.turns, args.rounds) < 1:
        parser.error("--conversations, --turns and --rounds must be at least 1")
    facts = server_facts(args.url)
    load_before = os.getloadavg()
    started = time.perf_counter()
    rounds: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    schemas: list[str] = []
    for number in range(args.rounds):
        order = SYSTEMS if number % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            with fresh_schema(args.url) as one, fresh_schema(args.url) as many:
                schemas += [one, many]
                result = in_fresh_process(system, args.url, (one, many), plan, args.seed)
            rounds[system].append(result)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    from journal_bench import source_fingerprint

    print(
        f"# JournalSession on PostgreSQL beside the Agents SDK's SQLAlchemySession"
        f"{' (QUICK: a smoke run, not a measurement)' if args.quick else ''}"
    )
    print(
        f"# {datetime.date.today()} · PostgreSQL {facts['server_version']}"
        f" (synchronous_commit={facts['synchronous_commit']}, fsync={facts['fsync']}) · psycopg"
        f" {psycopg.__version__} · SQLAlchemy {importlib.metadata.version('sqlalchemy')} ·"
        f" openai-agents {importlib.metadata.version('openai-agents')} · Python"
        f" {platform.python_version()} · {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} CPUs · src {source_fingerprint()} · medians of {args.rounds} rounds"
        f" · {elapsed:.0f} s"
    )
    print()
    print(
        "## One conversation: add_items (1 turn = 4 items),"
        " ratio = JournalSession / SQLAlchemySession"
    )
    print()
    print("\n".join(render_one(plan, rounds)))
    print()
    print(
        f"## {plan.conversations} conversations x {plan.turns} turns at once, one asyncio"
        " process: ratio = JournalSession / SQLAlchemySession turns/s"
    )
    print()
    print("\n".join(render_many(rounds)))
    print()
    windows = ", ".join(f"@{n:,}: turns {window(n)[0]}–{window(n)[-1]}" for n in plan.sizes)
    notes = [
        *spans(plan, rounds),
        f"- one conversation, timed windows (p50 and p99 of each call's time): {windows}",
        "- load: 1/5/15-minute averages"
        f" {' '.join(f'{v:.2f}' for v in load_before)} before,"
        f" {' '.join(f'{v:.2f}' for v in load_after)} after; the server, the client and anything"
        f" else on the machine share its {os.cpu_count()} CPUs",
        f"- role {facts['user']}: "
        + (
            "superuser or BYPASSRLS, so the journal's row-level security is not evaluated"
            if facts["bypass_rls"] == "yes"
            else "an ordinary role, so row-level security applies to the journal's statements"
        ),
        "- every system and workload wrote to a fresh schema of its own, dropped at its end:"
        f" {', '.join(schemas)}",
    ]
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

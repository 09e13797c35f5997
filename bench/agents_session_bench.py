"""`JournalSession` (agentjournal as the OpenAI Agents SDK's `Session`, on a SQLite file) against
the SDK's own `SQLiteSession`, on the same disk in the same run.

    .venv/bin/python bench/agents_session_bench.py            # the full run (about a minute)
    .venv/bin/python bench/agents_session_bench.py --quick    # a smoke run (sizes 10 and 50)

Each system grows one session turn by turn, one `add_items` per agent turn of 4 items (a user
message, a `function_call`, its `function_call_output`, an assistant `message`; the two texts are
~200 characters each, a third of them Chinese, from a fixed seed; both systems get the same
items). Every `add_items` is timed; the figure at N turns is the median over the window of turns
just before N (turns 2-10 for 10, the last N/2 capped at 100 above that). When the session reaches
N turns, `get_items()` and `get_items(limit=20)` are timed, call by call in alternation, after one
untimed call of each that checks they return exactly the items added.

JournalSession runs at `durability="full"` (`--durability normal` to change it): WAL,
`synchronous = FULL`. SQLiteSession runs as it comes: WAL at SQLite's default `synchronous` (FULL
in the usual builds; the run prints it). Each system runs in a fresh process (multiprocessing
`spawn`, `asyncio.run` inside), so they share no connection, SQLite cache or Python state; a round
runs both, and rounds alternate which goes first. A figure is the median of the rounds' figures;
ratio = agentjournal / SQLiteSession. Peak RSS is each process's `ru_maxrss`. The databases go
to a temporary directory under `--dir` (default: the system temp dir), removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import multiprocessing
import os
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload import turn_items

SYSTEMS = ("agentjournal", "SQLiteSession")
ADD_TARGET = 1.0  # add_items: agentjournal / SQLiteSession, at every size
FLAT_TARGET = 1.2  # get_items(limit=20): at the largest size / at the smallest, agentjournal
LIMIT = 20
WINDOW_CAP = 100  # most turns timed in an add_items window


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # session lengths in turns at which figures are taken
    reps_all: int  # timed get_items() calls per size
    reps_limit: int  # timed get_items(limit=20) calls per size


FULL = Plan(sizes=(10, 100, 1000), reps_all=21, reps_limit=101)
QUICK = Plan(sizes=(10, 50), reps_all=3, reps_limit=9)


def window(size: int) -> range:
    """The turns whose add_items make the figure at `size` turns (turn 1 creates the session)."""
    if size <= 10:
        return range(2, size + 1)
    return range(size - min(size // 2, WINDOW_CAP) + 1, size + 1)


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, else KiB


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


# -- one system, one round, in a fresh process -----------------------------------------------


def run_system(system: str, workdir: str, plan: Plan, seed: int, durability: str) -> dict[str, Any]:
    return asyncio.run(_run_system(system, Path(workdir), plan, seed, durability))


async def _run_system(
    system: str, workdir: Path, plan: Plan, seed: int, durability: str
) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    session: Any
    if system == "agentjournal":
        from agentjournal.integrations.openai_agents import JournalSession

        session = JournalSession.open(str(workdir / "agent.db"), "user-42", durability=durability)
    else:
        from agents import SQLiteSession

        session = SQLiteSession("user-42", workdir / "peer.db")
    added: list[dict[str, Any]] = []
    add_times: list[float] = []  # add_times[n - 1] is turn n's
    found: dict[str, dict[int, float]] = {"add": {}, "all": {}, "last": {}}
    try:
        for n in range(1, max(plan.sizes) + 1):
            items = turn_items(n, seed)
            start = time.perf_counter()
            await session.add_items(items)
            add_times.append(time.perf_counter() - start)
            added += items
            if n not in plan.sizes:
                continue
            found["add"][n] = ms([add_times[t - 1] for t in window(n)])
            # Untimed: both reads return exactly what was added (what the timed calls repeat).
            every = await session.get_items()
            last = await session.get_items(limit=LIMIT)
            if every != added or last != added[-LIMIT:]:
                raise AssertionError(f"{system}: get_items differs from the items added at {n}")
            all_times, last_times = [], []
            for rep in range(max(plan.reps_all, plan.reps_limit)):
                if rep < plan.reps_all:
                    start = time.perf_counter()
                    await session.get_items()
                    all_times.append(time.perf_counter() - start)
                if rep < plan.reps_limit:
                    start = time.perf_counter()
                    await session.get_items(limit=LIMIT)
                    last_times.append(time.perf_counter() - start)
            found["all"][n], found["last"][n] = ms(all_times), ms(last_times)
    finally:
        session.close()
    return {**found, "rss": peak_rss_mb()}


def in_fresh_process(*args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        result: dict[str, Any] = pool.submit(run_system, *args).result()
    return result


# -- the table --------------------------------------------------------------------------------


def fmt_ms(value: float) -> str:
    if value < 1:
        return f"{value:.3f} ms"
    return f"{value:.2f} ms" if value < 100 else f"{value:,.1f} ms"


def measures(plan: Plan) -> list[tuple[str, str, int]]:
    """(label, key, size) of every row but peak RSS, in table order."""
    labels = {
        "add": "add_items (1 turn = 4 items)",
        "all": "get_items()",
        "last": f"get_items(limit={LIMIT})",
    }
    return [(f"{labels[k]} @{n:,} turns", k, n) for k in labels for n in plan.sizes]


def render(plan: Plan, rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    def med(system: str, key: str, size: int) -> float:
        return statistics.median(r[key][size] for r in rounds[system])

    ours, peer = SYSTEMS
    small, large = plan.sizes[0], plan.sizes[-1]
    lines = [
        "| measure | agentjournal | SQLiteSession | ratio | target | met? |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for label, key, size in measures(plan):
        a, b = med(ours, key, size), med(peer, key, size)
        target, met = "—", "—"
        if key == "add":
            target = f"ratio ≤ {ADD_TARGET:.1f}"
            met = "yes" if a / b <= ADD_TARGET else "NO"
        elif key == "last" and size == large:
            growth = a / med(ours, key, small)
            peer_growth = b / med(peer, key, small)
            target = (
                f"flat: @{large:,} ≤ {FLAT_TARGET} × @{small:,} turns: {growth:.2f}"
                f" (SQLiteSession {peer_growth:.2f})"
            )
            met = "yes" if growth <= FLAT_TARGET else "NO"
        lines.append(f"| {label} | {fmt_ms(a)} | {fmt_ms(b)} | {a / b:.2f} | {target} | {met} |")
    rss = {s: statistics.median(r["rss"] for r in rounds[s]) for s in SYSTEMS}
    lines.append(
        f"| peak RSS | {rss[ours]:,.0f} MB | {rss[peer]:,.0f} MB | {rss[ours] / rss[peer]:.2f}"
        " | — | — |"
    )
    return lines


def notes(plan: Plan, rounds: dict[str, list[dict[str, Any]]]) -> list[str]:
    ours, peer = SYSTEMS
    spans = []
    for _, key, size in measures(plan):
        if key != "add":
            continue
        ratios = sorted(
            a[key][size] / b[key][size] for a, b in zip(rounds[ours], rounds[peer], strict=True)
        )
        spans.append(f"@{size:,} {ratios[0]:.2f}–{ratios[-1]:.2f}")
    windows = ", ".join(f"@{n:,}: turns {window(n)[0]}–{window(n)[-1]}" for n in plan.sizes)
    return [
        f"- add_items ratio, lowest–highest of the {len(rounds[ours])} rounds: " + "; ".join(spans),
        f"- add_items windows (median of each call's time): {windows}",
        f"- get_items: median of {plan.reps_all} calls of get_items() and {plan.reps_limit} of"
        f" get_items(limit={LIMIT}) per size, alternating, after one untimed call of each",
        "- peak RSS: ru_maxrss of each system's own process (median of the rounds)",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: sizes 10 and 50")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both systems (default 3)")
    parser.add_argument("--seed", type=int, default=20261203, help="content seed (default fixed)")
    parser.add_argument("--durability", choices=("full", "normal"), default="full")
    parser.add_argument("--dir", help="where the temporary databases go (default: the temp dir)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    with tempfile.TemporaryDirectory(prefix="aj-agents-", dir=args.dir) as tmp:
        for r in range(args.rounds):
            order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                workdir = os.path.join(tmp, f"round{r}-{system}")
                result = in_fresh_process(system, workdir, plan, args.seed, args.durability)
                rounds[system].append(result)
    elapsed = time.perf_counter() - started

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from journal_bench import source_fingerprint

    with sqlite3.connect(":memory:") as conn:
        synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
            conn.execute("PRAGMA synchronous").fetchone()[0], "?"
        )
    print(
        f"{datetime.date.today()} · {'QUICK (smoke) run' if args.quick else 'full run'} · "
        f"{args.rounds} rounds · Python {platform.python_version()} · SQLite "
        f"{sqlite3.sqlite_version} · openai-agents {importlib.metadata.version('openai-agents')} · "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs · "
        f"src {source_fingerprint()} · {elapsed:.0f} s"
    )
    print(
        f"JournalSession (durability={args.durability}) vs SQLiteSession (WAL, default"
        f" synchronous = {synchronous}); medians in ms per call;"
        " ratio = agentjournal / SQLiteSession"
    )
    print()
    print("\n".join(render(plan, rounds)))
    print()
    print("\n".join(notes(plan, rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`Journal.recover()` at start-up on a large database: its cost must follow the open work (the
expired leases, the cut turns), not the history.

    .venv/bin/python bench/recover_bench.py                                  # 1,000,000 events
    .venv/bin/python bench/recover_bench.py --events 20000 --sessions 200    # smoke run, seconds
    .venv/bin/python bench/recover_bench.py --db /var/tmp/recover-1m.db      # build once, reuse

The database: `--sessions` sessions holding `--events` events in all (agent turns of user
message, tool call, tool result, assistant message; `--open-turns` sessions end mid-turn, half
after the user's message, half on a tool call without a result), `--done-tasks` completed tasks
(history), all written with `append_many` at `durability="normal"` in a separate process. With
`--db PATH` it is built there once (parameters in PATH.json) and reused; every run measures a copy,
so the cached file never changes.

Each repetition: a worker claims the `--tasks` open tasks with a short lease, the leases expire,
and then one of these is timed (interleaved, so all see the same noise):

- `recover()` on a journal open in this process (connections warm; durability `full`, as
  `agentjournal serve`): settles the expired leases (one write transaction) and lists the cut turns;
- `Journal.open()` + `recover()`: the same from a fresh journal (what a restart pays);
- `open_turns()` alone (the read half of recover);
- the naive baseline, raw `sqlite3` on the same file, reading only: the seed's query shape,
  `SELECT * FROM tasks WHERE status IN ('pending', 'running')` (expired leases filtered in Python),
  then the sessions whose newest message is the user's (the newest row per session of `messages`)
  plus those with a tool call still pending (`tool_calls`), i.e. the same set recover finds, found
  by reading the history. It writes nothing, so it does less than recover.

Peak RSS is this process's `ru_maxrss` (the build ran in another process).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentjournal import Journal, NewEvent
from journal_bench import figure, peak_rss_mb, source_fingerprint, turn

TARGET = 0.050  # seconds: recover() on 1,000,000 events, 10,000 sessions, 50 expired leases
SEED_FIGURE = "0.47 s for 100 turns + 50 tasks (the second seed)"
TASK_TYPE = "bench.expire"
WORKER = "bench-worker"
TEMPLATES = 256  # distinct turns reused for the content (generating 1M random texts is slow)


# -- building --------------------------------------------------------------------------------


Spec = tuple[str, dict[str, Any]]


def _closed(templates: list[list[Spec]], count: int, start: int) -> list[Spec]:
    """`count` events ending with an assistant message: whole turns (call ids from `start`),
    then at most three messages to reach the count."""
    specs: list[Spec] = []
    number = start
    while count - len(specs) >= 4:
        template = templates[number % len(templates)]
        call_id = f"call_{number}"
        for type_, payload in template:
            if type_ in ("tool_call", "tool_result"):
                payload = {**payload, "call_id": call_id}
            specs.append((type_, payload))
        number += 1
    user = templates[number % len(templates)][0]
    assistant = templates[number % len(templates)][3]
    specs += {0: [], 1: [assistant], 2: [user, assistant], 3: [assistant, user, assistant]}[
        count - len(specs)
    ]
    return specs


def build(path: str, events: int, sessions: int, open_turns: int, done_tasks: int) -> float:
    """Write the database (in a child process); returns the seconds it took."""
    started = time.perf_counter()
    rng = random.Random(20240604)
    templates = [turn(rng, 0) for _ in range(TEMPLATES)]
    # Every session has its session_created; a completed task is three events.
    conversation = events - sessions - 3 * done_tasks
    if conversation < 4 * sessions:
        raise SystemExit(f"--events {events} is too few for {sessions} sessions")
    with Journal.open(path, durability="normal") as journal:
        ids = []
        for index in range(sessions):
            count = conversation // sessions + (index < conversation % sessions)
            session_id = journal.create_session(f"customer {index}").session_id
            ids.append(session_id)
            if index < open_turns:  # cut: after the user's message, or on a pending tool call
                template = templates[index % len(templates)]
                tail = template[:1] if index % 2 == 0 else template[:2]
                specs = _closed(templates, count - len(tail), 0) + tail
                specs[-len(tail) :] = [
                    (t, {**p, "call_id": "call_cut"} if t == "tool_call" else p) for t, p in tail
                ]
            else:
                specs = _closed(templates, count, 0)
            for start in range(0, len(specs), 500):
                batch = specs[start : start + 500]
                journal.append_many(session_id, [NewEvent(t, p) for t, p in batch])
            if index % 1000 == 999:
                print(f"  … {index + 1:,} sessions", file=sys.stderr, flush=True)
        for index in range(done_tasks):
            journal.create_task(ids[index % sessions], "report.orders", {"n": index})
            task = journal.claim_task("history-worker", ["report.orders"], lease_seconds=60)
            assert task is not None
            journal.complete_task(task.task_id, attempt=task.attempt, output={"orders": 42})
    return time.perf_counter() - started


def prepare(args: argparse.Namespace, workdir: Path) -> tuple[Path, str]:
    """The database to measure (a copy when `--db` caches it), and how it was obtained."""
    params = {
        "events": args.events,
        "sessions": args.sessions,
        "open_turns": args.open_turns,
        "done_tasks": args.done_tasks,
        "src": source_fingerprint(),
    }
    source = Path(args.db) if args.db else workdir / "built.db"
    sidecar = source.with_name(source.name + ".json")
    if source.exists() and sidecar.exists() and json.loads(sidecar.read_text()) == params:
        how = f"reused {source} (built earlier with the same parameters and sources)"
    else:
        for stale in (source, sidecar, *(source.with_name(source.name + s) for s in WAL_FILES)):
            stale.unlink(missing_ok=True)
        print(f"… building {args.events:,} events in {source}", file=sys.stderr, flush=True)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            seconds = pool.submit(
                build, str(source), args.events, args.sessions, args.open_turns, args.done_tasks
            ).result()
        sidecar.write_text(json.dumps(params))
        how = f"built in {seconds:.1f} s (append_many, durability normal, one process)"
    if not args.db:
        return source, how
    target = workdir / "measured.db"
    shutil.copyfile(source, target)  # the journal closed cleanly: no -wal to copy
    return target, how


WAL_FILES = ("-wal", "-shm")


# -- the work recover finds ------------------------------------------------------------------


def expire_leases(journal: Journal, count: int, lease: float) -> None:
    """Make the `count` bench tasks running under leases that have expired."""
    for _ in range(5):
        for _ in range(count):
            if journal.claim_task(WORKER, [TASK_TYPE], lease_seconds=lease) is None:
                break
        running = journal.tasks(status="running", type=TASK_TYPE, limit=1000)
        if len(running) == count:
            ends = max(t.lease_expires_at or 0 for t in running)
            time.sleep(max(0.0, ends / 1000 - time.time()) + 0.005)
            return
        # Some lease ran out while we were still claiming (a slow moment): claim again.
    raise RuntimeError(f"could not get {count} tasks running at once with a {lease} s lease")


def naive(path: Path) -> tuple[float, set[str], set[str]]:
    """The seed's shape on raw sqlite3: open tasks by status, cut turns by reading history."""
    start = time.perf_counter()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        now = int(time.time() * 1000)
        cursor = conn.execute("SELECT * FROM tasks WHERE status IN ('pending', 'running')")
        names = [d[0] for d in cursor.description]
        tasks = [dict(zip(names, row, strict=True)) for row in cursor]
        expired = {
            t["task_id"] for t in tasks if t["status"] == "running" and t["lease_expires_at"] < now
        }
        user_last = conn.execute(
            "SELECT m.session_id FROM messages AS m"
            " JOIN (SELECT session_id, max(seq) AS seq FROM messages GROUP BY session_id) AS n"
            " ON m.session_id = n.session_id AND m.seq = n.seq"
            " JOIN events AS e ON e.event_id = m.content_id WHERE e.type = 'user_message'"
        ).fetchall()
        pending = conn.execute(
            "SELECT DISTINCT session_id FROM tool_calls WHERE status = 'pending'"
        ).fetchall()
        cut = {row[0] for row in user_last} | {row[0] for row in pending}
    finally:
        conn.close()
    return time.perf_counter() - start, expired, cut


def stats(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:

        def one(sql: str) -> int:
            return int(conn.execute(sql).fetchone()[0])

        by_status = dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY status"))
        return {
            "events": one("SELECT count(*) FROM events"),
            "sessions": one("SELECT count(*) FROM sessions"),
            "messages": one("SELECT count(*) FROM messages"),
            "tool_calls": one("SELECT count(*) FROM tool_calls"),
            "tasks": by_status,
            "open_turns": one("SELECT count(*) FROM sessions WHERE turn_open = 1"),
            "bytes": path.stat().st_size,
        }
    finally:
        conn.close()


# -- measuring -------------------------------------------------------------------------------


def measure(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"recover": [], "open+recover": [], "open_turns": []}
    samples["naive"] = []
    control = Journal.open(path, durability="normal")  # the worker side: claims the tasks
    measured = Journal.open(path)  # durability full, as `agentjournal serve` opens it
    try:
        for task in control.tasks(status="open", type=TASK_TYPE, limit=1000):
            control.cancel_task(task.task_id, reason="left by an earlier run")
        ids = control.sessions(limit=args.tasks)
        for index in range(args.tasks):
            control.create_task(ids[index % len(ids)].session_id, TASK_TYPE, max_retries=100)
        expected_cut = {s.session_id for s in measured.open_turns()}
        found: dict[str, Any] = {"open_turns": len(expected_cut)}

        def check(recovery: Any, what: str) -> None:
            cut = {s.session_id for s in recovery.open_turns}
            if len(recovery.requeued) != args.tasks or recovery.failed or cut != expected_cut:
                raise RuntimeError(
                    f"{what}: requeued {len(recovery.requeued)}, failed {len(recovery.failed)},"
                    f" {len(cut)} open turns; expected {args.tasks}, 0, {len(expected_cut)}"
                )

        def timed_recover() -> float:
            start = time.perf_counter()
            recovery = measured.recover()
            seconds = time.perf_counter() - start
            check(recovery, "recover()")
            return seconds

        def timed_open_recover() -> float:
            start = time.perf_counter()
            fresh = Journal.open(path)
            recovery = fresh.recover()
            seconds = time.perf_counter() - start
            fresh.close()
            check(recovery, "open() + recover()")
            return seconds

        measured.recover()  # warm this process's connections once; the first run is not timed
        steps: list[tuple[str, Callable[[], float]]] = [
            ("recover", timed_recover),
            ("open+recover", timed_open_recover),
        ]
        for rep in range(args.reps):
            for name, step in steps if rep % 2 == 0 else steps[::-1]:
                expire_leases(control, args.tasks, args.lease)
                if name == "recover":  # the read-only ones, on the same state
                    seconds, expired, cut = naive(path)
                    if len(expired) != args.tasks or cut != expected_cut:
                        raise RuntimeError(
                            f"naive found {len(expired)} expired, {len(cut)} cut turns"
                        )
                    samples["naive"].append(seconds)
                    start = time.perf_counter()
                    measured.open_turns()
                    samples["open_turns"].append(time.perf_counter() - start)
                samples[name].append(step())
            print(f"  … repetition {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
        found["retry_count"] = max(
            t.retry_count for t in control.tasks(status="pending", type=TASK_TYPE, limit=1000)
        )
        return {"samples": samples, "found": found}
    finally:
        measured.close()
        control.close()


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def render(result: dict[str, Any], args: argparse.Namespace, console: Console) -> None:
    samples = result["samples"]
    naive_median = statistics.median(samples["naive"])
    table = Table(
        title=f"recover() with {args.tasks} expired leases and"
        f" {result['found']['open_turns']} cut turns (over {args.reps} runs each)",
        title_justify="left",
    )
    for column in ("measurement", "median", "p90", "min", "vs naive"):
        table.add_column(column, justify="left" if column == "measurement" else "right")
    table.add_column("target")
    table.add_column("met?")
    table.add_column("peak RSS", justify="right")
    labels = {
        "recover": "recover() (journal already open)",
        "open+recover": "Journal.open() + recover()",
        "open_turns": "open_turns() alone (read half)",
        "naive": "naive: raw SELECT open tasks + history scan",
    }
    for name, label in labels.items():
        values = samples[name]
        median = statistics.median(values)
        target, met = "—", "—"
        if name in ("recover", "open+recover"):
            target = f"< {figure(TARGET, 's')}"
            met = "yes" if median < TARGET else "NO"
        versus = "—" if name == "naive" else f"time {median / naive_median:.3f}×"
        table.add_row(
            label,
            figure(median, "s"),
            figure(p90(values), "s"),
            figure(min(values), "s"),
            versus,
            target,
            met,
            f"{peak_rss_mb():.0f} MB",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in all")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=50, help="tasks with expired leases")
    parser.add_argument("--open-turns", type=int, default=100, help="sessions cut mid-turn")
    parser.add_argument("--done-tasks", type=int, default=2_000, help="completed tasks (history)")
    parser.add_argument("--reps", type=int, default=15, help="timed runs of each measurement")
    parser.add_argument("--lease", type=float, default=0.1, help="seconds of each claimed lease")
    parser.add_argument("--db", help="build the database here once and reuse it (a copy is timed)")
    parser.add_argument("--dir", help="where the working files go (default: the temp dir)")
    args = parser.parse_args(argv)
    if not 1 <= args.reps <= 90:
        parser.error("--reps must be 1..90 (each run retries the tasks once; max_retries is 100)")
    if args.open_turns > args.sessions or args.done_tasks > args.events // 3:
        parser.error("--open-turns must be at most --sessions, and --done-tasks fit --events")
    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="recover-bench-", dir=args.dir) as tmp:
        path, how = prepare(args, Path(tmp))
        before = stats(path)
        result = measure(path, args)
    console.print(
        f"{datetime.date.today()} · recover() · Python {platform.python_version()} · "
        f"SQLite {sqlite3.sqlite_version} · {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs · src {source_fingerprint()} · "
        f"{time.perf_counter() - started:.0f} s",
        highlight=False,
    )
    render(result, args, console)
    tasks = ", ".join(f"{n:,} {status}" for status, n in sorted(before["tasks"].items()))
    notes = [
        f"database: {before['events']:,} events in {before['sessions']:,} sessions"
        f" ({before['messages']:,} messages, {before['tool_calls']:,} tool calls;"
        f" tasks before the run: {tasks}), {before['open_turns']:,} sessions cut mid-turn,"
        f" {before['bytes'] / 1e6:,.0f} MB; {how}.",
        f"each timed recover() put {args.tasks} expired tasks back to pending (one write"
        f" transaction, {args.tasks} task_failed events, fsync at durability full) and listed"
        f" {result['found']['open_turns']} cut turns; checked every time, as was the naive"
        " baseline's answer (the same tasks and sessions).",
        "naive: a raw read-only sqlite3 connection opened per run; it writes nothing, so recover"
        " does more work than it.",
        f"the seed reported {SEED_FIGURE}; target < {figure(TARGET, 's')}.",
        f"peak RSS: ru_maxrss of this process ({peak_rss_mb():.0f} MB; the build ran in another).",
    ]
    for note in notes:
        console.print(f"- {note}", highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

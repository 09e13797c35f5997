"""Stress the PostgreSQL global feed: does a reader resuming after its last position get every
event exactly once, in ascending position order, while many processes write at once?

    python bench/feed_stress.py [--url URL] [--rounds 20 | --seconds 300] [--writers 8]
                                [--burners 2] [--straddle]

Each round uses a fresh schema. `writers` processes (two threads each, so their appends meet in
group commits) run a mix of everything that writes events: plain appends and batches to their own
and to shared sessions, appends that sleep inside their transaction after the INSERT took its
event_ids (so younger transactions commit first), forks, task lifecycles (create, claim, progress,
complete) and imports of JSON Lines. Meanwhile the main process pages through
`events_all(after=<last position it saw>)` with random limits, and `burners` processes keep the
cores busy. When the writers are done and the feed has caught up, the reader's events are checked
against every row of the schema: duplicates, misses, positions not ascending, a session's seqs
out of order, and a position that differs from the stored (tx, event_id).

`--straddle` first spends transaction ids (a server-side loop of empty transactions) until the
next one is just below a power of ten, so the round's positions straddle it: the feed once sorted
positions as text there ('999' after '1000'). It is skipped for a round when it would spend more
than `--max-burn` ids.

Prints one line per round and a table; `run()` is what tests/backends/test_feed_stress.py calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import secrets
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit

import psycopg

from agentjournal import Event, Journal
from agentjournal.backends import WriteTx
from agentjournal.transfer import import_lines

DEFAULT_URL = "postgresql://127.0.0.1:5432/test"
LIMITS = (1, 3, 20, 100, 500)  # the reader's page sizes, chosen at random per page
WAIT = 120.0  # seconds a round may take to settle before it is reported as stuck


@dataclass
class RoundReport:
    events: int = 0
    pages: int = 0  # reader rounds: each a resume after the last position seen
    duplicates: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)
    out_of_order: int = 0  # positions not above the one before
    seq_violations: int = 0  # a session's events not in seq order 1, 2, 3, ...
    wrong_positions: int = 0  # a position other than the stored (tx, event_id)
    writer_errors: list[str] = field(default_factory=list)
    min_tx: int = 0
    max_tx: int = 0

    @property
    def clean(self) -> bool:
        return not (
            self.duplicates
            or self.missed
            or self.out_of_order
            or self.seq_violations
            or self.wrong_positions
            or self.writer_errors
        )

    @property
    def straddled(self) -> bool:
        return len(str(self.min_tx)) != len(str(self.max_tx))


# -- writers (each a process of its own) --------------------------------------------------------


def slow_append(journal: Journal, sid: str, batch: list[Any], delay: float) -> list[Event]:
    """`append_many` that sleeps `delay` seconds inside its transaction, after the INSERT."""
    prepared = journal.prepare_batch(batch)

    def work(tx: WriteTx) -> list[Event]:
        events = journal._append_tx(tx, sid, prepared)
        time.sleep(delay)
        return events

    return journal.storage.write(work)


def _messages(name: str, count: int) -> list[dict[str, Any]]:
    return [
        {"type": "user_message", "payload": {"content": f"{name}/{i} 订单 {secrets.token_hex(4)}"}}
        for i in range(count)
    ]


def _one_op(journal: Journal, rng: random.Random, name: str, own: str, shared: list[str]) -> None:
    kind = rng.choices(["slow", "append", "fork", "task", "import"], weights=[40, 30, 10, 12, 8])[0]
    sid = own if rng.random() < 0.4 else rng.choice(shared)
    if kind == "slow":
        slow_append(journal, sid, _messages(name, rng.randint(1, 3)), rng.uniform(0, 0.02))
    elif kind == "append":
        journal.append_many(sid, _messages(name, rng.randint(1, 3)))
    elif kind == "fork":
        journal.fork(own)
    elif kind == "task":
        task = journal.create_task(own, f"stress.{name}", {"n": rng.randint(0, 9)})
        claimed = journal.claim_task(f"{name}-worker", [task.type], lease_seconds=60)
        if claimed is not None:
            journal.task_progress(claimed.task_id, 0.5, attempt=claimed.attempt)
            journal.complete_task(claimed.task_id, attempt=claimed.attempt, output={"ok": True})
    else:
        new = f"{name}-import-{secrets.token_hex(4)}"
        lines = [
            json.dumps(
                {
                    "session_id": new,
                    "seq": 1,
                    "type": "session_created",
                    "payload": {"title": "imported"},
                }
            ),
            *(
                json.dumps({"session_id": new, "seq": 2 + i, **message})
                for i, message in enumerate(_messages(name, rng.randint(1, 4)))
            ),
        ]
        import_lines(journal, lambda: lines)


def writer(
    url: str, name: str, shared: list[str], ops: int, seed: int, ready: Any, go: Any, out: Any
) -> None:
    quiet_superuser_warning()
    errors: list[str] = []
    with Journal.open(url) as journal:
        own = journal.create_session(name).session_id
        ready.set()
        go.wait()

        def thread(index: int) -> None:
            rng = random.Random(seed * 100 + index)
            for op in range(ops):
                try:
                    _one_op(journal, rng, f"{name}.{index}", own, shared)
                except Exception as exc:  # reported, never hidden: the round is not clean
                    errors.append(f"{name}.{index}/{op}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=thread, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    out.put(errors)


def quiet_superuser_warning() -> None:
    # The default URL logs in as the local superuser, which the journal rightly warns about
    # (row-level security does not bind it); once per process is noise in a benchmark's table.
    logging.getLogger("agentjournal.postgres").setLevel(logging.ERROR)


def burner(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


# -- the reader and the checks ------------------------------------------------------------------


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    name = f"aj_stress_{secrets.token_hex(5)}"
    try:
        yield name
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def burn_to_power_of_ten(url: str, margin: int, max_burn: int) -> int:
    """Spend transaction ids until the next one is `margin` below a power of ten; returns how
    many were spent (0 when that would be more than `max_burn`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert row is not None
        current = int(row[0])
        target = 10 ** len(str(current)) - margin
        if target <= current:
            target = 10 ** (len(str(current)) + 1) - margin
        spend = target - current
        if spend > max_burn:
            return 0
        conn.execute(
            "CREATE PROCEDURE pg_temp.spend_xids(n bigint) LANGUAGE plpgsql AS $$"
            " BEGIN FOR i IN 1..n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"
        )
        conn.execute("CALL pg_temp.spend_xids(%s)", (spend,))
        return spend


class Writers:
    """`count` writer processes and `burners` CPU burners on the journal at `journal_url`: started
    (each writer's own session created) on entering, released together by `go()`; `finish()`
    waits for the writers and returns their errors; leaving stops the burners."""

    def __init__(
        self, journal_url: str, shared: list[str], *, count: int, ops: int, burners: int, seed: int
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process holding a Journal
        self._stop = ctx.Event()
        self._go = ctx.Event()
        self._out: Any = ctx.Queue()
        self._readies = [ctx.Event() for _ in range(count)]
        self._writers = [
            ctx.Process(
                target=writer,
                args=(
                    journal_url,
                    f"w{i}",
                    shared,
                    ops,
                    seed * 1000 + i,
                    self._readies[i],
                    self._go,
                    self._out,
                ),
            )
            for i in range(count)
        ]
        self._burners = [ctx.Process(target=burner, args=(self._stop,)) for _ in range(burners)]

    def __enter__(self) -> Writers:
        for proc in self._writers + self._burners:
            proc.start()
        for ready in self._readies:
            if not ready.wait(WAIT):
                self.__exit__()
                raise RuntimeError("a writer did not start")
        return self

    def go(self) -> None:
        self._go.set()

    @property
    def done(self) -> bool:
        return all(not proc.is_alive() for proc in self._writers)

    def finish(self) -> list[str]:
        errors: list[str] = []
        for _ in self._writers:
            errors += self._out.get(timeout=WAIT)  # each writer's list, sent as it ends
        for proc in self._writers:
            proc.join(WAIT)
        return errors

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for proc in self._writers + self._burners:
            proc.join(WAIT if proc in self._burners else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def run_round(
    url: str, *, writers: int, ops: int, burners: int, seed: int, tenant_url: str | None = None
) -> RoundReport:
    """One round on a fresh schema of `url`'s database. `tenant_url`, if given, is the URL the
    journal connects with (e.g. an application role's, which owns nothing); `url` creates,
    migrates (granting `tenant_url`'s role) and drops the schema."""
    rng = random.Random(seed)
    report = RoundReport()
    with fresh_schema(url) as schema:
        journal_url = _with_schema(tenant_url or url, schema)
        if tenant_url is not None:
            role = urlsplit(tenant_url).username
            Journal.migrate(_with_schema(url, schema), grant_to=[role] if role else [])
        with Journal.open(journal_url) as journal:
            shared = [journal.create_session(f"shared {i}").session_id for i in range(3)]
            with Writers(
                journal_url, shared, count=writers, ops=ops, burners=burners, seed=seed
            ) as running:
                running.go()
                seen: list[Event] = []
                cursor: str | None = None
                deadline = time.monotonic() + WAIT
                while True:
                    done = running.done
                    page = journal.events_all(after=cursor, limit=rng.choice(LIMITS))
                    report.pages += 1
                    seen += page
                    cursor = page[-1].position if page else cursor
                    if done and not page:
                        # Every writer exited and a page came back empty: the end, unless the
                        # feed still holds back a commit (a transaction elsewhere in the cluster).
                        stored = _stored(url, schema)
                        if len({e.event_id for e in seen}) >= len(stored):
                            break
                        if time.monotonic() > deadline:
                            break  # reported as missed
                        time.sleep(0.05)
                report.writer_errors = running.finish()
        _check(report, seen, stored)
    return report


def _stored(url: str, schema: str) -> dict[int, tuple[int, str, int]]:
    """event_id -> (tx, session_id, seq) of every row, read as the superuser/owner."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('agentjournal.tenant', '*', false)")
        rows = conn.execute(
            f"SELECT event_id, tx::text, session_id, seq FROM {schema}.events"
        ).fetchall()
    return {row[0]: (int(row[1]), row[2], row[3]) for row in rows}


def _check(report: RoundReport, seen: list[Event], stored: dict[int, tuple[int, str, int]]) -> None:
    ids = [e.event_id for e in seen]
    report.events = len(stored)
    report.duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    report.missed = sorted(set(stored) - set(ids))
    positions = [int(e.position) for e in seen]
    report.out_of_order = sum(1 for a, b in pairwise(positions) if b <= a)
    seqs: dict[str, list[int]] = defaultdict(list)
    for event in seen:
        seqs[event.session_id].append(event.seq)
        tx, _, _ = stored.get(event.event_id, (-1, "", 0))
        if int(event.position) != (tx << 64 | event.event_id):
            report.wrong_positions += 1
    report.seq_violations = sum(
        1 for found in seqs.values() for a, b in pairwise(found) if b != a + 1
    )
    txs = [tx for tx, _, _ in stored.values()]
    report.min_tx, report.max_tx = (min(txs), max(txs)) if txs else (0, 0)


def run(
    url: str = DEFAULT_URL,
    *,
    rounds: int = 1,
    seconds: float | None = None,
    writers: int = 8,
    ops: int = 40,
    burners: int = 2,
    straddle: bool = False,
    max_burn: int = 20_000_000,
    seed: int = 1,
    tenant_url: str | None = None,
    log: Any = None,
) -> list[RoundReport]:
    reports: list[RoundReport] = []
    start = time.monotonic()
    index = 0
    while (index < rounds) if seconds is None else (time.monotonic() - start < seconds):
        spent = burn_to_power_of_ten(url, 400, max_burn) if straddle else 0
        report = run_round(
            url,
            writers=writers,
            ops=ops,
            burners=burners,
            seed=seed + index,
            tenant_url=tenant_url,
        )
        reports.append(report)
        if log is not None:
            summary = {k: v for k, v in asdict(report).items() if v}
            summary["straddled"] = report.straddled
            summary["xids spent first"] = spent
            summary["duplicates"] = len(report.duplicates)
            summary["missed"] = len(report.missed)
            print(f"round {index + 1}: {json.dumps(summary)}", file=log, flush=True)
        index += 1
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AGENTJOURNAL_BENCH_PG", DEFAULT_URL))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=None, help="run rounds for this long")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--ops", type=int, default=40, help="per writer thread")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--straddle", action="store_true")
    parser.add_argument("--max-burn", type=int, default=20_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    quiet_superuser_warning()
    began = time.monotonic()
    reports = run(
        args.url,
        rounds=args.rounds,
        seconds=args.seconds,
        writers=args.writers,
        ops=args.ops,
        burners=args.burners,
        straddle=args.straddle,
        max_burn=args.max_burn,
        seed=args.seed,
        log=sys.stdout,
    )
    rows = [
        ("rounds (fresh schema each)", len(reports)),
        ("rounds whose positions straddled a power of ten", sum(r.straddled for r in reports)),
        ("reader rounds (resumes after the last position)", sum(r.pages for r in reports)),
        ("events written and checked", sum(r.events for r in reports)),
        ("events read twice", sum(len(r.duplicates) for r in reports)),
        ("events never read", sum(len(r.missed) for r in reports)),
        ("positions not ascending", sum(r.out_of_order for r in reports)),
        ("seq order broken within a session", sum(r.seq_violations for r in reports)),
        ("positions unlike the stored (tx, event_id)", sum(r.wrong_positions for r in reports)),
        ("rounds with a violation", sum(not r.clean for r in reports)),
        ("writer errors", sum(len(r.writer_errors) for r in reports)),
        ("seconds", round(time.monotonic() - began, 1)),
    ]
    print(f"\n| {'measure':<50} | {'value':>8} |\n| {'-' * 50} | {'-' * 8}: |")
    for name, value in rows:
        print(f"| {name:<50} | {value:>8} |")


if __name__ == "__main__":
    main()

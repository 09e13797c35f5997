"""A worker process for the PostgreSQL tests (tests/backends/test_postgres.py), in three roles:

    python pg_instance.py write URL NAME --shared S1,S2 --ops 40 --seed 7 [--max-delay 0.02]
    python pg_instance.py recover URL
    python pg_instance.py claim URL NAME --threads 4

`write` (the gap test): opens a Journal, creates a session of its own, prints "ready" and waits
for a line on stdin; then does `ops` appends of 1-3 events to its own session or a shared one.
Most of them run on the library's own write path with a random sleep *inside* the transaction,
after the events were inserted (their event_ids taken) and before COMMIT; the rest are plain
`append_many` calls. Prints {"acks": [[event_id, session_id, seq, position], ...], "errors": []}.

`recover`: prints "started" and waits for a line, then opens the Journal (so that several
processes open one fresh schema at once), prints "opened" or the error, waits for a second line
and runs `recover(all_tenants=True)`. Prints {"requeued": [...], "failed": [...], "errors": []}.

`claim`: opens a Journal, prints "ready", waits for a line, then `threads` threads claim tasks
until none is left, completing each. Prints {"claims": [[task_id, attempt, worker], ...],
"errors": []}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from typing import Any

from agentjournal import Event, Journal
from agentjournal.backends import WriteTx


def _row(event: Event) -> list[Any]:
    return [event.event_id, event.session_id, event.seq, event.position]


def slow_append(journal: Journal, sid: str, batch: list[Any], delay: float) -> list[Event]:
    """`append_many` with `delay` seconds of sleep inside its transaction, after the INSERT."""
    prepared = journal.prepare_batch(batch)

    def work(tx: WriteTx) -> list[Event]:
        # The same rules and statements as append(); then the transaction stays open, its
        # event_ids taken, while other writers take later ids and commit before it.
        events = journal._append_tx(tx, sid, prepared)
        time.sleep(delay)
        return events

    return journal.storage.write(work)


def write(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    shared = [s for s in args.shared.split(",") if s]
    acks: list[list[Any]] = []
    errors: list[str] = []
    with Journal.open(args.url) as journal:
        own = journal.create_session(args.name).session_id
        acks += [_row(e) for e in journal.events(own)]
        print("ready", flush=True)
        sys.stdin.readline()
        for op in range(args.ops):
            sid = own if rng.random() < 0.4 or not shared else rng.choice(shared)
            batch = [
                {"type": "user_message", "payload": {"content": f"{args.name}/{op}/{index}"}}
                for index in range(rng.randint(1, 3))
            ]
            try:
                if rng.random() < 0.25:
                    stored = journal.append_many(sid, batch)
                else:
                    delay = rng.uniform(0, args.max_delay)
                    stored = slow_append(journal, sid, batch, delay)
            except Exception as exc:
                errors.append(f"{args.name}/{op}: {type(exc).__name__}: {exc}")
                continue
            acks += [_row(e) for e in stored]
    print(json.dumps({"acks": acks, "errors": errors}), flush=True)


def recover(args: argparse.Namespace) -> None:
    print("started", flush=True)
    sys.stdin.readline()
    try:
        journal = Journal.open(args.url)
    except Exception as exc:
        print(f"error {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        return
    with journal:
        print("opened", flush=True)
        sys.stdin.readline()
        try:
            recovery = journal.recover(all_tenants=True)
        except Exception as exc:
            report: dict[str, Any] = {"errors": [f"{type(exc).__name__}: {exc}"]}
        else:
            report = {"requeued": recovery.requeued, "failed": recovery.failed, "errors": []}
    print(json.dumps(report), flush=True)


def claim(args: argparse.Namespace) -> None:
    claims: list[list[Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    with Journal.open(args.url) as journal:
        print("ready", flush=True)
        sys.stdin.readline()

        def work(thread: int) -> None:
            worker = f"{args.name}/{thread}"
            try:
                while (task := journal.claim_task(worker, lease_seconds=60)) is not None:
                    with lock:
                        claims.append([task.task_id, task.attempt, task.lease_owner])
                    journal.complete_task(task.task_id, attempt=task.attempt, output=worker)
            except Exception as exc:
                with lock:
                    errors.append(f"{worker}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(json.dumps({"claims": claims, "errors": errors}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    roles = parser.add_subparsers(dest="role", required=True)
    writer = roles.add_parser("write")
    writer.add_argument("url")
    writer.add_argument("name")
    writer.add_argument("--shared", default="")
    writer.add_argument("--ops", type=int, default=40)
    writer.add_argument("--seed", type=int, default=0)
    writer.add_argument("--max-delay", type=float, default=0.02)
    recoverer = roles.add_parser("recover")
    recoverer.add_argument("url")
    claimer = roles.add_parser("claim")
    claimer.add_argument("url")
    claimer.add_argument("name")
    claimer.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    {"write": write, "recover": recover, "claim": claim}[args.role](args)


if __name__ == "__main__":
    main()

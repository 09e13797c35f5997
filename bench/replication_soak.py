"""Replication under SIGKILL: a replicator process killed at random instants, again and again,
while the source is written concurrently; afterwards the target must hold every source event
exactly once, in order per session, purged sessions must be gone, and verify must be clean on
both.

    .venv/bin/python bench/replication_soak.py                      # 200 kills, SQLite -> SQLite
    .venv/bin/python bench/replication_soak.py --target URL         # into PostgreSQL
    .venv/bin/python bench/replication_soak.py --quick              # 30 kills (the test suite's)

The writer (a thread of this process) creates sessions, appends single events and batches, tool
calls with their results, forks, and now and then purges a session. Each replicator is
`agentjournal.replicate(..., follow=True)` in a fresh interpreter, killed with SIGKILL a random
time (0-300 ms) after it has opened both journals: mid-read, mid-transaction, mid-commit, or
idle. Exit status 1 if any check fails, with what differed.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentjournal import Journal, JournalError, NewEvent, replicate
from agentjournal.transfer import committed_events

CHILD = """
import sys
from agentjournal import Journal, replicate
source = Journal.open(sys.argv[1], create=False)
target = Journal.open(sys.argv[2])
print("ready", flush=True)
replicate(source, target, follow=True, batch_size=int(sys.argv[3]), poll_interval=0.02)
"""


class Writer(threading.Thread):
    """Writes the source until stopped: the mix an agent fleet's edge journal sees."""

    def __init__(self, source: Journal, seed: int) -> None:
        super().__init__(daemon=True)
        self.source = source
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sessions: list[str] = []
        self.purged: set[str] = set()
        self.events = 0
        self.failure: BaseException | None = None
        self.calls = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.step()
                time.sleep(self.rng.uniform(0, 0.004))
        except BaseException as exc:
            self.failure = exc

    def step(self) -> None:
        rng, source = self.rng, self.source
        roll = rng.random()
        if not self.sessions or roll < 0.08:
            self.sessions.append(source.create_session(f"s{len(self.sessions)}").session_id)
            return
        sid = rng.choice(self.sessions)
        if roll < 0.10 and len(self.sessions) > 3:
            source.purge_session(sid, actor="soak")
            self.sessions.remove(sid)
            self.purged.add(sid)
            return
        if roll < 0.12:
            self.sessions.append(source.fork(sid).session_id)
            return
        if roll < 0.30:
            self.calls += 1
            call = f"c{self.calls}"
            source.append_many(
                sid,
                [
                    NewEvent("assistant_message", {"content": ""}),
                    NewEvent("tool_call", {"call_id": call, "name": "look", "arguments": "{}"}),
                    NewEvent("tool_result", {"call_id": call, "content": "found"}),
                ],
            )
            return
        role = rng.choice(["user_message", "assistant_message"])
        source.append(sid, role, {"content": f"event {self.events} {'x' * rng.randint(0, 200)}"})
        self.events += 1


def kill_run(
    source_url: str, target_url: str, kills: int, seed: int, batch: int = 7
) -> dict[str, Any]:
    """Write the source while a replicator is killed `kills` times; then catch up and check.
    Returns the figures and the problems found (empty when exactly once held)."""
    rng = random.Random(seed)
    with Journal.open(source_url) as source, Journal.open(target_url) as target:
        writer = Writer(source, seed)
        writer.start()
        started = time.perf_counter()
        killed_mid_batch = 0
        for _ in range(kills):
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, source_url, target_url, str(batch)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            child.stdout.readline()  # "ready" (or "" if it died first: then it is reported)
            before = _applied(target)
            time.sleep(rng.uniform(0, 0.3))
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
            killed_mid_batch += _applied(target) != before
            if writer.failure is not None:
                break
        writer.stop.set()
        writer.join()
        seconds = time.perf_counter() - started
        final = replicate(source, target)  # what the killed ones left: caught up now
        problems = check(source, target, writer.purged)
        if writer.failure is not None:
            problems.insert(0, f"the writer failed: {writer.failure!r}")
        return {
            "kills": kills,
            "seconds": seconds,
            "source events": len(list(committed_events(source))),
            "sessions": len(writer.sessions),
            "purged": len(writer.purged),
            "runs that applied a batch": killed_mid_batch,
            "left for the final catch-up": final.events_read,
            "problems": problems,
        }


def _applied(target: Journal) -> int:
    return sum(p.events for p in target.replication_status())


def _feed(journal: Journal) -> dict[str, list[tuple[Any, ...]]]:
    sessions: dict[str, list[tuple[Any, ...]]] = {}
    for e in committed_events(journal):
        row = (e.seq, e.type, e.payload, e.created_at, e.idempotency_key)
        sessions.setdefault(e.session_id, []).append(row)
    return sessions


def check(source: Journal, target: Journal, purged: set[str]) -> list[str]:
    """What differs between the source and the target (empty: every event exactly once)."""
    problems = []
    want, got = _feed(source), _feed(target)
    for sid, events in want.items():
        if got.get(sid) != events:
            held = got.get(sid, [])
            problems.append(
                f"session {sid}: source has {len(events)} events, target {len(held)}"
                f" (seqs {[e[0] for e in held][:20]}...)"
            )
    extra = set(got) - set(want)
    if extra:
        problems.append(f"sessions in the target that the source does not hold: {sorted(extra)}")
    back = purged & set(got)
    if back:
        problems.append(f"purged sessions present in the target: {sorted(back)}")
    for name, journal in (("source", source), ("target", target)):
        report = journal.verify()
        if not report.ok:
            problems.append(f"verify of the {name}: {report}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="30 kills")
    parser.add_argument("--target", help="target URL (default: a SQLite file in --dir)")
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args(argv)
    kills = 30 if args.quick else args.kills
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        source_url = str(Path(folder) / "edge.db")
        target_url = args.target or str(Path(folder) / "central.db")
        try:
            result = kill_run(source_url, target_url, kills, args.seed)
        except JournalError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    for name, value in result.items():
        if name != "problems":
            shown = f"{value:.1f}" if isinstance(value, float) else value
            print(f"{name:>30}: {shown}")
    print(f"{'exactly once':>30}: {'yes' if not result['problems'] else 'NO'}")
    for problem in result["problems"]:
        print(f"  {problem}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Crash safety: a child process with 16 writer threads is SIGKILLed at random moments, over and
over, on one database (a SQLite file, or a PostgreSQL schema: there the server lives on and the kill
cuts the child's connections, some in the middle of a transaction or of its COMMIT). After each kill
the reopened journal holds every acknowledged event, every batch whole or not at all, gapless seqs,
and `verify()` finds no difference.

A failure prints the seed; rerun with AGENTJOURNAL_CRASH_SEED=<seed> to repeat the kill delays.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Event, Journal, VerifyReport
from expected import all_events

HELPER = Path(__file__).parent / "helpers" / "crash_writer.py"
KILLS = 20
WAIT = 30.0  # seconds: the most any single step may take before the test fails instead of hanging


class Child:
    """One run of the crash writer; `acks` holds every line it wrote before it died."""

    def __init__(
        self, url: str, logs: Path, durability: str, run: int, shared: list[str], seed: int
    ) -> None:
        self.stderr_path = logs / f"child-{run}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HELPER),
                    url,
                    durability,
                    str(run),
                    ",".join(shared),
                    str(seed),
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                encoding="utf-8",
            )
        self.lines: list[dict[str, Any]] = []
        self.writing = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # the kill cut this line short: it acknowledges nothing
            self.lines.append(json.loads(line))
            self.writing.set()
        self.writing.set()

    def kill_after(self, delay: float) -> list[dict[str, Any]]:
        """Wait until the writers are acknowledging, let them run `delay` seconds, SIGKILL."""
        try:
            assert self.writing.wait(WAIT), "the child acknowledged nothing"
            assert self.proc.poll() is None, f"the child died by itself: {self.stderr()}"
            time.sleep(delay)
        finally:
            self.proc.kill()  # SIGKILL
            self.proc.wait(WAIT)
            self.reader.join(WAIT)
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        assert not self.reader.is_alive()
        return self.lines

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")[-2000:]


def settled(journal: Journal) -> tuple[list[Event], VerifyReport]:
    """The whole feed and a `verify()` report that counted the same events. On SQLite the first
    read is final. On PostgreSQL a COMMIT the child sent just before it died may still land, and
    the feed shows an event once every transaction older than it has ended (docs/postgres.md):
    read again until the two agree, within WAIT."""
    deadline = time.monotonic() + WAIT
    while True:
        events = all_events(journal)
        report = journal.verify()
        if report.events_checked == len(events):
            return events, report
        assert time.monotonic() < deadline, (
            f"the feed shows {len(events)} events, verify() checked {report.events_checked}"
        )
        time.sleep(0.05)


def check_journal(url: str, acked: dict[int, tuple[str, int, str, str | None]]) -> int:
    """Everything the crash test promises about the journal; returns how many events it holds."""
    with Journal.open(url) as journal:
        events, report = settled(journal)
    assert report.ok, report.to_dict()

    by_id = {event.event_id: event for event in events}
    assert len(by_id) == len(events)
    for event_id, (session_id, seq, type_, tag) in acked.items():
        event = by_id.get(event_id)
        assert event is not None, f"acknowledged event {event_id} ({type_} {tag}) was lost"
        assert (event.session_id, event.seq, event.type, event.payload.get("tag")) == (
            session_id,
            seq,
            type_,
            tag,
        )

    seqs: dict[str, list[int]] = defaultdict(list)
    batches: dict[str, list[Event]] = defaultdict(list)
    tags = [event.payload["tag"] for event in events if "tag" in event.payload]
    for event in events:
        seqs[event.session_id].append(event.seq)
        if "batch" in event.payload:
            batches[event.payload["batch"]].append(event)
    assert len(tags) == len(set(tags)), "an event was stored twice"
    for session_id, found in seqs.items():
        assert sorted(found) == list(range(1, len(found) + 1)), f"seq gap in {session_id}"
    for tag, members in batches.items():
        size = members[0].payload["size"]
        members.sort(key=lambda event: event.payload["index"])
        assert [m.payload["index"] for m in members] == list(range(size)), (
            f"batch {tag} is stored partly: {len(members)} of {size} events"
        )
        assert {m.session_id for m in members} == {members[0].session_id}
        first = members[0].seq
        assert [m.seq for m in members] == list(range(first, first + size))
    return len(events)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["full", "normal"])
def test_sigkill_loses_no_acknowledged_event(
    journal_url: str, tmp_path: Path, durability: str
) -> None:
    """A process crash loses nothing acknowledged at either durability (only power loss may
    cost `normal` its last commits; on PostgreSQL only a crash of the server), and never leaves
    half of a batch."""
    seed = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    with Journal.open(journal_url, durability=durability) as journal:  # type: ignore[arg-type]
        shared = [journal.create_session(f"shared {n}").session_id for n in range(4)]

    acked: dict[int, tuple[str, int, str, str | None]] = {}
    batches_acked = 0
    stored = 0
    for run in range(KILLS):
        child = Child(journal_url, tmp_path, durability, run, shared, rng.randrange(2**32))
        lines = child.kill_after(rng.uniform(0.02, 0.15))
        errors = [line["error"] for line in lines if "error" in line]
        assert not errors, f"seed {seed}, run {run}: {errors}\n{child.stderr()}"
        for line in lines:
            batches_acked += line["batch"] is not None
            for event_id, seq, type_, tag in line["events"]:
                assert event_id not in acked, f"event_id {event_id} acknowledged twice"
                acked[event_id] = (line["session"], seq, type_, tag)
        try:
            now_stored = check_journal(journal_url, acked)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, after kill {run + 1}: {exc}") from exc
        assert now_stored > stored, f"seed {seed}: run {run} stored nothing"
        stored = now_stored

    # The kills landed among real work: many appends and batches were acknowledged, and some
    # commits were cut off from their acknowledgement (the kill hit a write in flight).
    assert len(acked) >= KILLS * 16
    assert batches_acked >= KILLS
    assert stored > len(acked) + len(shared)

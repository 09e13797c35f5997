"""The central PostgreSQL really restarted under a following replicator: a private cluster
(tests/helpers/pg_cluster.py, never the shared server) restarted six times at random instants
while `agentjournal replicate --follow` applies small batches into it and the source is written
concurrently, shut down cleanly (`-m fast`) and crashed (`-m immediate`, recovery from the WAL).
The replicator backs off while the server is down, resumes from the target's position, and the
target ends with every source event exactly once, in order per session; verify is clean on both."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import psycopg

from agentjournal import Journal, replicate
from agentjournal.transfer import committed_events
from bench_runs import bench_module
from helpers.pg_cluster import private_cluster


def soak() -> ModuleType:
    return bench_module("replication_soak.py")


class Lines(threading.Thread):
    """A child's output, line by line, as it comes."""

    def __init__(self, stream: object) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []

    def run(self) -> None:
        for line in self.stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def batches(self) -> int:
        return sum(1 for line in self.lines if line.startswith('{"batch"'))


def test_a_target_restarted_and_crashed_mid_run_ends_with_every_event_once(
    tmp_path: Path,
) -> None:
    checks = soak()
    rng = random.Random(15)
    modes = ["fast", "immediate", "fast", "immediate", "immediate", "fast"]
    edge = tmp_path / "edge.db"
    with private_cluster() as cluster, Journal.open(edge) as source:
        writer = checks.Writer(source, seed=15)
        writer.start()
        command = ["replicate", str(edge), cluster.app_url, "--follow", "--batch", "5", "--json"]
        child = subprocess.Popen(
            [sys.executable, "-m", "agentjournal.cli", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = Lines(child.stdout), Lines(child.stderr)
        out.start()
        err.start()
        applied_between: list[int] = []
        try:
            deadline = time.monotonic() + 30
            while out.batches() == 0 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert out.batches() > 0, "".join(err.lines)
            for mode in modes:
                before = out.batches()
                time.sleep(rng.uniform(0.1, 0.8))
                cluster.restart(mode)
                # Applying again (into the restarted server) before the next restart.
                while out.batches() == before and child.poll() is None:
                    if time.monotonic() > deadline + 30:
                        break
                    time.sleep(0.02)
                applied_between.append(out.batches() - before)
        finally:
            writer.stop.set()
            writer.join()
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=60)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            out.join(timeout=10)
            err.join(timeout=10)
            for stream in (child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
        stderr = "".join(err.lines)
        assert child.returncode == 0, stderr
        assert writer.failure is None
        assert cluster.restarts == len(modes)
        # After every restart the replicator applied batches again (its lost connections
        # replaced, by the library's own retries or after the replicator's backoff).
        assert all(applied_between), (applied_between, stderr)
        assert "superuser" not in stderr
        summary = json.loads(out.lines[-1])
        assert summary["events_read"] > 0
        with Journal.open(cluster.app_url) as target:
            replicate(source, target)  # whatever the follower had not reached yet
            problems = checks.check(source, target, writer.purged)
            if problems:  # what the table holds beside what the feed shows, to tell them apart
                with psycopg.connect(cluster.url.rsplit("/", 1)[0] + "/journal") as admin:
                    row = admin.execute(
                        "SELECT count(*), max(tx)::text, pg_current_snapshot()::text FROM events"
                    ).fetchone()
                problems.insert(0, f"events table (count, max tx, snapshot): {row}")
                problems.insert(1, f"target feed: {len(list(committed_events(target)))} events")
                problems.insert(2, f"replicator's stderr: {stderr[-4000:]}")
            assert not problems, "\n".join([*problems[:5], f"... {len(problems)} in all"])

"""The source's disk fills up while it is written and followed: the source journal lives on a
small tmpfs the test mounts (root only; CI runs as root), the writer appends until the file
system is full and gets a typed `StorageError` with nothing half-written, the replicator goes on
carrying everything that was committed, and once the file system is grown again the writer goes
on, both journals verify clean and the target holds every committed event exactly once."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_replication_faults import soak

from agentjournal import Journal, replicate
from agentjournal.errors import StorageError
from agentjournal.transfer import committed_events

WAIT = 60.0  # seconds the replicator may take to catch up: far above need; only a failure waits


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs at tmp_path/disk, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def applied(target: Journal) -> int:
    return sum(p.events for p in target.replication_status())


def wait_for(target: Journal, events: int) -> None:
    deadline = time.monotonic() + WAIT
    while applied(target) < events:
        assert time.monotonic() < deadline, f"{applied(target)} of {events} events replicated"
        time.sleep(0.05)


def test_a_full_source_disk_fails_the_writer_and_replication_carries_what_committed(
    small_disk: Path, tmp_path: Path
) -> None:
    checks = soak()
    source_path = small_disk / "edge.db"
    target_path = tmp_path / "central.db"
    with Journal.open(source_path) as source, Journal.open(target_path) as target:
        stop = threading.Event()
        failures: list[BaseException] = []

        def on_error(exc: BaseException, pause: float) -> None:
            failures.append(exc)

        follower = threading.Thread(
            target=replicate,
            args=(str(source_path), str(target_path)),
            kwargs={"follow": True, "stop": stop, "batch_size": 50, "on_error": on_error},
        )
        follower.start()
        try:
            sessions = [source.create_session(f"s{n}").session_id for n in range(4)]
            committed = len(sessions)
            full: StorageError | None = None
            for n in range(100_000):
                sid = sessions[n % len(sessions)]
                before = source.get_session(sid).last_seq
                try:
                    source.append(sid, "user_message", {"content": f"{n} " + "x" * 1500})
                except StorageError as exc:
                    full = exc
                    # Nothing of the refused append is in the journal.
                    assert source.get_session(sid).last_seq == before
                    break
                committed += 1
            assert full is not None, "the 8 MiB file system never filled"
            assert "full" in str(full).lower(), full
            assert committed > 100

            # The replicator carries on with everything committed while the disk is full.
            wait_for(target, committed)
            assert len(list(committed_events(target))) == committed

            # Space returns: the writer goes on, and so does replication.
            subprocess.run(
                ["mount", "-o", "remount,size=64m", str(small_disk)], check=True, timeout=30
            )
            for n in range(50):
                source.append(sessions[n % len(sessions)], "assistant_message", {"content": "ok"})
            committed += 50
            wait_for(target, committed)
        finally:
            stop.set()
            follower.join(timeout=WAIT)
        assert not follower.is_alive()
        # The replicator never lost its source or target: a full disk is the writer's problem.
        assert failures == []
        assert checks.check(source, target, set()) == []
        assert len(list(committed_events(target))) == committed

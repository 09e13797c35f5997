"""The replicator killed with SIGKILL at random instants, many times, while the source is written
concurrently (bench/replication_soak.py, short form): afterwards the target holds every source
event exactly once, in order per session, no purged session, and verify is clean on both."""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

from bench_runs import BENCH, bench_module
from postgres_fixtures import fresh_schema, url_for


def soak() -> ModuleType:
    return bench_module("replication_soak.py")


@pytest.mark.slow
@pytest.mark.parametrize(("target", "kills"), [("sqlite", 30), ("postgres", 15)])
def test_sigkilled_replicators_leave_every_event_exactly_once(
    tmp_path: Path, target: str, kills: int
) -> None:
    with ExitStack() as stack:
        if target == "sqlite":
            target_url = str(tmp_path / "central.db")
        else:
            target_url = url_for(stack.enter_context(fresh_schema("kill")))
        result = soak().kill_run(str(tmp_path / "edge.db"), target_url, kills, seed=kills)

    assert result["problems"] == []
    assert result["kills"] == kills
    # The kills landed while replicators were working, not only before they began.
    assert result["runs that applied a batch"] > kills // 2
    assert result["purged"] > 0


def test_the_soak_script_runs_and_says_exactly_once(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "replication_soak.py"),
            "--kills",
            "3",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kills: 3" in done.stdout
    assert "exactly once: yes" in done.stdout
    assert list(tmp_path.iterdir()) == []

"""`make demo` end to end: a real server process killed at rest, mid-turn and mid-task. Its
tables come from the journal; compare them with the golden file (only the kill statistics and
the timing vary from run to run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "demo.txt"
VARYING = re.compile(r"SIGKILL sent|task completed by attempt|all checks passed|a check failed")


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    result = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return result, db


def test_demo_output_matches_golden_file(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = demo_run
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines() if not VARYING.search(line)]
    assert lines == GOLDEN.read_text(encoding="utf-8").splitlines()


def test_demo_kills_three_times_and_every_check_passes(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, db = demo_run
    assert result.returncode == 0, result.stderr
    kills = [line for line in result.stdout.splitlines() if "SIGKILL sent" in line]
    assert len(kills) == 3, kills
    finished = next(line for line in result.stdout.splitlines() if "task completed" in line)
    assert re.search(r"by attempt 2: it continued from step [1-9] of 10", finished), finished
    assert "✗" not in result.stdout
    assert "all checks passed" in result.stdout
    for suffix in ("", "-wal", "-shm", "-lock"):
        assert not Path(f"{db}{suffix}").exists()  # the demo cleans up after itself


def test_demo_leaves_no_server_running(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, db = demo_run
    assert result.returncode == 0
    found = subprocess.run(["pgrep", "-f", f"serve --db {db}"], capture_output=True, check=False)
    assert found.returncode == 1, found.stdout  # pgrep: 1 = no process matched

"""`bench/adk_bench.py --quick` runs both services and prints every measure of its table
(behaviour only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
pytest.importorskip("aiosqlite")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "adk_bench.py"

MEASURES = [
    "append_event (1 event)",
    "append_event with app: and user: state",
    "get_session latest 20 @100 events",
    "get_session latest 20 @1,000 events",
    "list_sessions 1 user @100 sessions",
    "list_sessions whole app @100 sessions",
    "list_sessions 1 user @1,000 sessions",
    "list_sessions whole app @1,000 sessions",
    "peak RSS",
]


def test_quick_run_prints_every_measure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path), "--appends", "10"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "QUICK" in done.stdout
    for measure in MEASURES:
        assert measure in done.stdout, measure

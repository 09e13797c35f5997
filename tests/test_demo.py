"""The demo's printed tables come from events() and replay() of the reopened file; compare them
with the golden file (only the kill statistics vary from run to run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "demo.txt"
VARYING = re.compile(r"SIGKILL sent|acknowledged events|all checks passed|a check failed")


def run_demo(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "demo", "--db", str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_demo_output_matches_golden_file(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines() if not VARYING.search(line)]
    assert lines == GOLDEN.read_text(encoding="utf-8").splitlines()


def test_demo_reports_no_loss_after_the_kill(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    summary = next(line for line in result.stdout.splitlines() if "acknowledged events" in line)
    assert re.search(r"\d+ acknowledged events, 0 lost; verify\(\): ok=True", summary)
    assert "all checks passed" in result.stdout
    assert not (tmp_path / "demo.db").exists()  # the demo cleans up after itself

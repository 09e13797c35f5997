"""`bench/agents_session_bench.py --quick` runs both sessions and prints every measure of its
table (behaviour only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "agents_session_bench.py"

MEASURES = [
    "add_items (1 turn = 4 items) @10 turns",
    "add_items (1 turn = 4 items) @50 turns",
    "get_items() @10 turns",
    "get_items() @50 turns",
    "get_items(limit=20) @10 turns",
    "get_items(limit=20) @50 turns",
    "peak RSS",
]
HEADER = "| measure | agentjournal | SQLiteSession | ratio | target | met? |"


def test_quick_run_prints_every_measure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert HEADER in lines, done.stdout
    assert "QUICK" in done.stdout
    for measure in MEASURES:
        rows = [line for line in lines if line.startswith(f"| {measure} |")]
        assert len(rows) == 1, f"{measure!r} missing from:\n{done.stdout}"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        assert len(cells) == 6, rows[0]
        assert all(cells[1:4]), rows[0]  # both figures and their ratio are printed
    # Both targets get a verdict (whichever it is), and the temporary databases are gone.
    verdicts = [line.rsplit("|", 2)[-2].strip() for line in lines if "ratio ≤" in line]
    assert verdicts, done.stdout
    assert all(v in ("yes", "NO") for v in verdicts), done.stdout
    assert any(
        line.startswith("| get_items(limit=20) @50 turns |") and "flat" in line for line in lines
    )
    assert list(tmp_path.iterdir()) == []

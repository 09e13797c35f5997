"""`bench/langgraph_bench.py --quick` runs every saver and prints every measure of its tables
(behaviour only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")
pytest.importorskip("langgraph.checkpoint.postgres")

from postgres_fixtures import require_postgres

BENCH = Path(__file__).resolve().parent.parent / "bench" / "langgraph_bench.py"

MEASURES = [
    "invoke (1 turn) @5 turns",
    "invoke (1 turn) @20 turns",
    "bytes on disk @5 turns",
    "bytes on disk @20 turns",
    "get_state @5 turns",
    "get_state @20 turns",
    "peak RSS",
]


def test_quick_run_prints_every_measure_for_both_backends(tmp_path: Path) -> None:
    require_postgres()
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "QUICK" in done.stdout
    lines = done.stdout.splitlines()
    for header in (
        "| measure | JournalSaver | SqliteSaver | ratio | target | met? |",
        "| measure | JournalSaver (PostgreSQL) | PostgresSaver | ratio | target | met? |",
    ):
        assert header in lines, done.stdout
    for measure in MEASURES:
        rows = [line for line in lines if line.startswith(f"| {measure} |")]
        assert len(rows) == 2, f"{measure!r} missing from:\n{done.stdout}"
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            assert len(cells) == 6, row
            assert all(cells[1:4]), row  # both figures and their ratio are printed
    # Every row with a target gets a verdict (whichever it is): time, bytes and flatness.
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line[:2] == "| "]
    targets = [c for c in rows if len(c) == 6 and c[4] not in ("", "target", "---")]
    verdicts = [cells[5] for cells in targets]
    assert len(verdicts) == 3, done.stdout
    assert all(v in ("yes", "NO") for v in verdicts), done.stdout
    assert list(tmp_path.iterdir()) == []

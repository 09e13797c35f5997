"""`bench/agents_session_bench.py --quick` runs both sessions and prints every measure of its
table (behaviour only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_runs import run_quick

pytest.importorskip("agents")


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
    out = run_quick("agents_session_bench.py", tmp_path)
    lines = out.splitlines()
    assert HEADER in lines, out
    assert "QUICK" in out
    for measure in MEASURES:
        rows = [line for line in lines if line.startswith(f"| {measure} |")]
        assert len(rows) == 1, f"{measure!r} missing from:\n{out}"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        assert len(cells) == 6, rows[0]
        assert all(cells[1:4]), rows[0]  # both figures and their ratio are printed
    # Both targets get a verdict (whichever it is), and the temporary databases are gone.
    verdicts = [line.rsplit("|", 2)[-2].strip() for line in lines if "ratio ≤" in line]
    assert verdicts, out
    assert all(v in ("yes", "NO") for v in verdicts), out
    assert any(
        line.startswith("| get_items(limit=20) @50 turns |") and "flat" in line for line in lines
    )
    assert list(tmp_path.iterdir()) == []


def test_the_concurrency_quick_run_prints_every_system(tmp_path: Path) -> None:
    """`bench/agents_concurrency_bench.py --quick`: every way of holding the conversations gets
    a row with its rate, ratio and latencies (each run checks that every conversation holds
    exactly what it added), and the temporary databases are gone."""
    out = run_quick("agents_concurrency_bench.py", tmp_path)
    lines = out.splitlines()
    assert (
        "| system | turns/s | ratio | target | met? | add_items p50 ms | p99 ms | peak RSS MB |"
        in lines
    )
    for system in ("SQLiteSession", "JournalSession, shared journal", "JournalSession.open"):
        rows = [line for line in lines if line.startswith(f"| {system} |")]
        assert len(rows) == 1, f"{system!r} missing from:\n{out}"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        assert len(cells) == 8, rows[0]
        assert cells[2].endswith("x"), rows[0]
        assert all(cells[i] for i in (1, 5, 6, 7)), rows[0]
    assert list(tmp_path.iterdir()) == []

"""`bench/peers_bench.py --quick` runs agentjournal beside every installed peer and prints each
row of its table (behaviour only: the figures come from a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_runs import run_quick

pytest.importorskip("agents")
pytest.importorskip("eventsourcing")

ROWS = [
    "write one turn, FULL",
    "write one turn, NORMAL",
    "p99 ÷ median of one turn @10 turns, FULL",
    "p99 ÷ median of one turn @100 turns, FULL",
    "p99 ÷ median of one turn @10 turns, NORMAL",
    "p99 ÷ median of one turn @100 turns, NORMAL",
    "4 processes × 20 turns, FULL (turns/s)",
    '… writes failing with "database is locked"',
    "bytes on disk per turn (closed)",
    "read everything back (400 items)",
    "read the last 20",
]


def test_quick_run_measures_every_system_on_every_row(tmp_path: Path) -> None:
    out = run_quick("peers_bench.py", tmp_path, timeout=300)
    lines = out.splitlines()
    header = "| per turn | raw sqlite3 | agentjournal | SQLiteSession | eventsourcing |"
    assert header + " agentjournal ÷ raw |" in lines, out
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]
    table = {cells[0]: cells[1:] for cells in rows}
    for row in ROWS:
        cells = table[row]
        assert len(cells) == 5, row
        assert all(c != "—" for c in cells[:2]), row  # raw and agentjournal on every row
    # The peers that cannot choose a durability have no NORMAL row; all four have the rest.
    for row in ("write one turn, NORMAL", "p99 ÷ median of one turn @100 turns, NORMAL"):
        assert [c == "—" for c in table[row][:4]] == [False, False, True, True], row
    assert table["p99 ÷ median of one turn @100 turns, FULL"][4] == "—"  # a ratio of ratios
    assert table['… writes failing with "database is locked"'][1] == "0"
    assert list(tmp_path.iterdir()) == []

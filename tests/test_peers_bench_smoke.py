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
    table = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in lines[2:]}
    for row in ROWS:
        cells = table[row]
        assert len(cells) == 5, row
        assert all(c != "—" for c in cells[:2]), row  # raw and agentjournal on every row
    # The peers that cannot choose a durability have no NORMAL row; all four have the rest.
    assert [c == "—" for c in table["write one turn, NORMAL"][:4]] == [False, False, True, True]
    assert table['… writes failing with "database is locked"'][1] == "0"
    assert list(tmp_path.iterdir()) == []

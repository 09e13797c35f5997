"""`bench/inspector_bench.py --quick` opens a 1,000-event session in chromium with the current
inspector and with the baseline's page files, and prints its table (behaviour only: the figures
are measured by a full run, never asserted in tests)."""

from __future__ import annotations

import re
from pathlib import Path

from browsing import require_chromium

from bench_runs import run_quick


def test_the_quick_run_prints_the_table_for_both_inspectors(tmp_path: Path) -> None:
    require_chromium()
    printed = run_quick("inspector_bench.py", tmp_path)
    row = next(line for line in printed.splitlines() if line.startswith("| 1,000 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert re.fullmatch(r"[0-9,]+ ms", cells[1]), row
    items_now = int(cells[4].replace(",", ""))
    assert 0 < items_now <= 600, row
    if cells[2] != "not run":  # the baseline needs the repository's git history
        assert int(cells[5].replace(",", "")) > items_now, "the baseline holds every item"
    assert "open < 1000 ms at 1,000 events" in printed
    assert (tmp_path / "long-1000.db").exists()

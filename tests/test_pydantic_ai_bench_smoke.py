"""`bench/pydantic_ai_bench.py --quick` runs every store and prints every measure of its table
(behaviour only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from postgres_fixtures import require_postgres

BENCH = Path(__file__).resolve().parent.parent / "bench" / "pydantic_ai_bench.py"
STORES = [
    "JSON file",
    "JSON file + fsync",
    "JournalHistory (SQLite)",
    "JournalHistory (PostgreSQL)",
    "JournalConversationStore (SQLite)",
]


def test_quick_run_prints_every_measure_of_every_store(tmp_path: Path) -> None:
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
    assert "| store | measure | figure | ÷ JSON file | target | met? |" in lines, done.stdout
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line[:2] == "| "]
    for store in STORES:
        measures = {cells[1] for cells in rows if cells[0] == store}
        expected = {f"{m} @{n} turns" for m in ("save", "load") for n in (5, 20)}
        if "PostgreSQL" not in store:
            expected |= {"bytes @5 turns", "bytes @20 turns"}
        assert measures == expected, (store, done.stdout)
    # Every save of the journal's stores has a target and a verdict (whichever it is).
    verdicts = [cells[5] for cells in rows if cells[4] == "≤ 1"]
    assert len(verdicts) == 6, done.stdout
    assert all(v in ("yes", "NO") for v in verdicts), done.stdout
    assert list(tmp_path.iterdir()) == []

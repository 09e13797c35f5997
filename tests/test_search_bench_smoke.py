"""`bench/search_bench.py --quick` runs on both backends and prints every row (behaviour only:
the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

from bench_runs import run_quick
from postgres_fixtures import require_postgres

ROWS = [
    "appends/s, one writer · full",
    "appends/s, one writer · normal",
    "search: common word (~50 %)",
    "search: uncommon word (~3 %)",
    "search: rare: one event",
    "search: two words",
    "search: Chinese word",
    "search: one Chinese character",
    "search: prefix",
    "search, all queries",
    "search, whole words (all but prefix)",
]


def test_quick_run_prints_every_row_for_both_backends(tmp_path: Path) -> None:
    require_postgres()
    out = run_quick("search_bench.py", tmp_path)
    assert "QUICK" in out
    for backend in ("sqlite", "postgres"):
        for row in ROWS:
            assert any(backend in line and row in line for line in out.splitlines()), (
                f"{backend}: {row!r} missing from:\n{out}"
            )
    assert list(tmp_path.iterdir()) == []

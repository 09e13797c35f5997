"""`bench/replication_bench.py --quick` runs and prints its table and the lag line (behaviour
only: the figures are measured by a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

from bench_runs import run_quick
from postgres_fixtures import require_postgres


def test_quick_run_prints_catch_up_beside_export_import_and_the_lag(tmp_path: Path) -> None:
    require_postgres()
    out = run_quick("replication_bench.py", tmp_path)
    for shown in ("replicate (batch 500)", "export + import", "× export+import", "QUICK"):
        assert shown in out, f"{shown!r} missing from:\n{out}"
    assert "lag, append on the edge -> seen in the central feed" in out
    assert " p50 " in out
    assert " p99 " in out
    assert list(tmp_path.iterdir()) == []

"""`bench/otel_bench.py --quick` runs and prints every row (behaviour only: the figures are
measured by a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

from bench_runs import run_quick

ROWS = ["SDK in-memory exporter", "OTLP/HTTP, loopback", "OTLP/HTTP, with content"]


def test_quick_run_prints_every_row(tmp_path: Path) -> None:
    out = run_quick("otel_bench.py", tmp_path)
    assert "QUICK" in out
    for row in ROWS:
        assert row in out, f"{row!r} missing from:\n{out}"
    assert "1,000" in out  # 200 turns, 5 spans each, on every row
    assert list(tmp_path.iterdir()) == []

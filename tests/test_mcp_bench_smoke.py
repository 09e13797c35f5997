"""`bench/mcp_bench.py --quick` runs and prints every row (behaviour only: the figures are measured
by a full run, never asserted in tests)."""

from __future__ import annotations

from pathlib import Path

from bench_runs import run_quick


def test_quick_run_prints_every_row(tmp_path: Path) -> None:
    out = run_quick("mcp_bench.py", tmp_path)
    assert "QUICK" in out
    for call in ("search (20 hits)", "read the newest 20 events"):
        for through in ("MCP stdio", "MCP HTTP", "HTTP API"):
            assert any(call in line and through in line for line in out.splitlines()), out
    assert list(tmp_path.iterdir()) == []

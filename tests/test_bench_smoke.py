"""`bench/journal_bench.py --quick` runs and prints every benchmark of the table (behaviour only:
the figures themselves are measured by `make bench`, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "journal_bench.py"

BENCHMARKS = [
    "appends/s, one writer · full",
    "appends/s, one writer · normal",
    "appends/s, 16 writers · full",
    "appends/s, 16 writers · normal",
    "agent turn (append_many) @10 turns · full",
    "agent turn (append_many) @10 turns · normal",
    "messages(last=20) @10 events · full",
    "messages(last=20) @1,000 events · normal",
    "replay() @4,000 events · full",
    "replay() @4,000 events · normal",
    "bytes/turn",
]
COLUMNS = ["benchmark", "agentjournal", "raw sqlite3", "target", "ratio", "met?", "peak RSS"]


def test_quick_run_prints_every_benchmark(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in BENCHMARKS + COLUMNS:
        assert name in done.stdout, f"{name!r} missing from:\n{done.stdout}"
    assert "QUICK" in done.stdout
    # Every figure has a verdict or a dash, and the temporary databases are gone.
    assert any(verdict in done.stdout for verdict in ("yes", "NO"))
    assert list(tmp_path.iterdir()) == []

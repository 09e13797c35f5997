"""`bench/wal_bench.py` and `bench/transfer_bench.py` run on small sizes and print their tables
(behaviour only: the figures are measured by `make bench-ops`, never asserted in tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        (
            "wal_bench.py",
            ["--events", "3000", "--long-read-every", "0.5", "--long-read-for", "0.2"],
            [
                "short reads",
                "overlapping reads",
                "a long read",
                "bulk import",
                "baseline",
                "WAL limit",
                "-wal at end",
            ],
        ),
        (
            "transfer_bench.py",
            ["--events", "3000", "--sessions", "10"],
            ["import", "export", "× raw", "budget 100 MB"],
        ),
    ],
)
def test_small_run_prints_its_table(script: str, args: list[str], expected: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for text in expected:
        assert text in done.stdout, f"{text!r} missing from:\n{done.stdout}"

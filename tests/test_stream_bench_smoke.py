"""`bench/stream_bench.py --quick` streams through a real `agentjournal serve --agent openai` and
the fake model server and prints every row of its table (behaviour only: the figures are measured
by a full run, never asserted in tests), with every stream complete and nothing left behind."""

from __future__ import annotations

import re
from pathlib import Path

from bench_runs import run_quick

ROWS = [
    f"{what} @{n} · {path}"
    for n in ("1 turn", "4 turns")
    for what in ("first delta", "every delta")
    for path in ("direct (httpx-sse)", "OpenAIChatModel.stream()", "through /turns")
]
COLUMNS = ["p50", "p99", "overhead p50", "overhead p99", "met?", "streams complete"]


def test_quick_run_prints_every_row(tmp_path: Path) -> None:
    out = run_quick("stream_bench.py", tmp_path)
    for name in ROWS + COLUMNS:
        assert name in out, f"{name!r} missing from:\n{out}"
    assert "QUICK" in out
    # Every stream, direct and through /turns, got every chunk in order.
    for row in ROWS:
        [line] = [line for line in out.splitlines() if row in line]
        done = re.findall(r"(\d+)/(\d+)", line)
        assert done, line
        assert all(got == of for got, of in done), line
    assert list(tmp_path.iterdir()) == []

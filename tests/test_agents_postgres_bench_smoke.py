"""`bench/agents_postgres_bench.py --quick` runs `JournalSession` on PostgreSQL beside the SDK's
`SQLAlchemySession` and prints every row of both tables (behaviour only: the figures are measured
by a full run, never asserted in tests), and drops every schema it made."""

from __future__ import annotations

import re
import subprocess
import sys

import psycopg
import pytest

from bench_runs import BENCH
from postgres_fixtures import ADMIN_URL, require_postgres

pytest.importorskip("agents")
pytest.importorskip("sqlalchemy.ext.asyncio")

SYSTEMS = ("SQLAlchemySession", "JournalSession, shared journal", "JournalSession.open")


def test_quick_run_prints_every_row_and_drops_its_schemas() -> None:
    require_postgres()
    done = subprocess.run(
        [sys.executable, str(BENCH / "agents_postgres_bench.py"), "--quick", "--url", ADMIN_URL],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = out.splitlines()
    assert "QUICK" in out
    # One conversation: every system at every size, with both figures; each JournalSession
    # row has its ratios and a verdict.
    for size in (10, 50):
        for system in SYSTEMS:
            rows = [line for line in lines if line.startswith(f"| {system} | {size} |")]
            assert len(rows) == 1, f"{system!r} @{size} missing from:\n{out}"
            cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
            assert len(cells) == 8, rows[0]
            assert all(cells[i] for i in (2, 4)), rows[0]
            if system != "SQLAlchemySession":
                assert all(cells[i] for i in (3, 5)), rows[0]
                assert cells[7] in ("yes", "NO"), rows[0]
    # At once: every system with its rate, ratio and latencies.
    assert "| system | turns/s | ratio | target | met? | add_items p50 ms | p99 ms |" in lines
    for system in SYSTEMS:
        rows = [line for line in lines if line.startswith(f"| {system} |") and "x |" in line]
        assert len(rows) == 1, f"{system!r} missing from:\n{out}"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        assert len(cells) == 7, rows[0]
        assert cells[2].endswith("x"), rows[0]
        assert all(cells[i] for i in (1, 5, 6)), rows[0]
    schemas = re.findall(r"aj_agents_[0-9a-f]+", out)
    assert len(set(schemas)) == 2 * len(SYSTEMS), out  # two workloads a system, one round
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", (schemas,)
        ).fetchall()
    assert left == []

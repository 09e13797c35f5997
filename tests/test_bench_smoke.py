"""`bench/journal_bench.py --quick` runs and prints every benchmark of the table (behaviour only:
the figures themselves are measured by `make bench`, never asserted in tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from bench_runs import BENCH, run_quick
from postgres_fixtures import ADMIN_URL, require_postgres

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
    out = run_quick("journal_bench.py", tmp_path)
    for name in BENCHMARKS + COLUMNS:
        assert name in out, f"{name!r} missing from:\n{out}"
    assert "QUICK" in out
    # Every figure has a verdict or a dash, and the temporary databases are gone.
    assert any(verdict in out for verdict in ("yes", "NO"))
    assert list(tmp_path.iterdir()) == []


def test_raw_baseline_has_the_same_tables_and_indexes_as_the_journal(tmp_path: Path) -> None:
    """The ratio is honest only if the baseline maintains the same indexes as agentjournal."""
    import importlib.util
    import sqlite3

    from agentjournal import Journal

    spec = importlib.util.spec_from_file_location("journal_bench", BENCH / "journal_bench.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["journal_bench"] = bench
    spec.loader.exec_module(bench)

    def shape(conn: sqlite3.Connection, tables: set[str]) -> dict[str, list[tuple[object, ...]]]:
        found = {}
        for table in sorted(tables):
            columns = [row[1:] for row in conn.execute(f"PRAGMA table_info({table})")]
            indexes = sorted(
                (row[1], row[2], row[4]) for row in conn.execute(f"PRAGMA index_list({table})")
            )
            index_columns = sorted(
                (name, tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})")))
                for name, _, _ in indexes
                if not name.startswith("sqlite_autoindex")
            )
            found[table] = [*columns, *[(u, p) for _, u, p in indexes], *index_columns]
        return found

    tables = {"sessions", "events", "messages", "tool_calls"}
    raw = sqlite3.connect(":memory:")
    raw.executescript(bench.RAW_SCHEMA)
    Journal.open(tmp_path / "j.db").close()
    ours = sqlite3.connect(tmp_path / "j.db")
    try:
        assert shape(raw, tables) == shape(ours, tables)
    finally:
        ours.close()
        raw.close()


def test_recover_bench_runs_small_and_checks_what_it_times(tmp_path: Path) -> None:
    """bench/recover_bench.py at a small scale: it prints its table, and it checks every timed
    recover() did its work (50 tasks back to pending, the cut turns listed)."""
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "recover_bench.py"),
            "--events",
            "20000",
            "--sessions",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    for row in ("recover() (journal already open)", "Journal.open() + recover()", "naive"):
        assert row in done.stdout, done.stdout
    assert "put 50 expired tasks back to pending" in done.stdout


def test_postgres_bench_runs_tiny_and_drops_its_schema() -> None:
    """bench/postgres_bench.py with a handful of events: it prints its table with a number in every
    cell (the speed itself is not asserted), and the schema it created is gone afterwards."""
    require_postgres()
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "postgres_bench.py"),
            *("--url", ADMIN_URL, "--events", "32", "--repeat", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    header = ["scenario", "sqlite journal ev/s", "pg raw ev/s", "pg journal ev/s"]
    for column in [*header, "pg journal / pg raw"]:
        assert column in out, f"{column!r} missing from:\n{out}"
    for scenario in ("one writer", "16 writers", "append_many(100)"):
        row = next((line for line in out.splitlines() if f" {scenario} " in line), None)
        assert row is not None, f"no row for {scenario!r} in:\n{out}"
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        assert cells[0] == scenario, row
        rates = [float(cell.replace(",", "")) for cell in cells[1:4]]
        assert all(rate > 0 for rate in rates), row
        ratio = float(cells[4])  # one repetition: pg journal / pg raw of that run, rounded
        assert abs(ratio - rates[2] / rates[1]) <= 0.01 + 0.02 * ratio, row
    assert "shared cores" in out  # the machine caveat
    schema = re.search(r"schema (aj_bench_[0-9a-f]+)", out)
    assert schema is not None, out
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema.group(1),)
        ).fetchone()
    assert left is None, f"{schema.group(1)} was not dropped"

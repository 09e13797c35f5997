"""`bench/write_anatomy.py --quick` times its three writers at both durabilities and reads each
commit's pages back from the WAL (behaviour only: no test asserts a time)."""

from __future__ import annotations

import re
from pathlib import Path

from bench_runs import run_quick

ROW = re.compile(
    r"^  (agentjournal|same SQL, raw|4 raw INSERTs) +\d+ µs .* ([\d.]+) pages per commit$"
)


def test_quick_run_times_every_writer_and_names_the_pages_it_writes(tmp_path: Path) -> None:
    out = run_quick("write_anatomy.py", tmp_path)
    rows = [m.groups() for line in out.splitlines() if (m := ROW.match(line))]
    assert [name for name, _ in rows] == ["agentjournal", "same SQL, raw", "4 raw INSERTs"] * 2
    pages = {name: float(count) for name, count in rows[:3]}
    # One table and its rowid against the journal's tables and indexes: the WAL tells them apart.
    assert 1 <= pages["4 raw INSERTs"] < pages["agentjournal"]
    trees = [line for line in out.splitlines() if "pages by b-tree" in line]
    assert len(trees) == 2
    for line in trees:
        assert all(name in line for name in ("events", "messages", "tool_calls", "sessions"))
    assert list(tmp_path.iterdir()) == []  # the temporary files are gone

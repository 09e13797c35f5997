"""`agentjournal search` as a user runs it: a real process on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from agentjournal import Journal


def aj(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_search_prints_hits_and_json_and_exits_1_when_nothing_matched(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("订单客服").session_id
        journal.append(sid, "user_message", {"content": "帮我查一下订单数量"})
        journal.append(sid, "assistant_message", {"content": "42 个订单"})
    shown = aj("search", "订单", "--db", str(db_path))
    assert shown.returncode == 0, shown.stderr
    assert sid in shown.stdout
    assert "帮我查一下订单数量" in shown.stdout
    found = aj("search", "订单", "--type", "assistant_message", "--db", str(db_path), "--json")
    page = json.loads(found.stdout)
    assert [(h["session_id"], h["seq"]) for h in page["hits"]] == [(sid, 3)]
    missing = aj("search", "nothing-like-this", "--db", str(db_path))
    assert missing.returncode == 1
    assert "no events matched" in missing.stderr
    bad = aj("search", '"()', "--db", str(db_path))
    assert bad.returncode == 2
    assert "no words" in bad.stderr


def test_rebuild_indexes_a_database_from_before_search(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("old").session_id
        journal.append(sid, "user_message", {"content": "capybara"})
    with closing(sqlite3.connect(db_path)) as conn:  # as an older file would be
        conn.execute("INSERT INTO search_index (search_index) VALUES ('delete-all')")
        conn.execute("UPDATE search_state SET indexed_upto = 2")
        conn.commit()
    assert aj("verify", "--db", str(db_path)).returncode == 1  # the index lacks seq 1 and 2
    rebuilt = aj("search", "--rebuild", "--db", str(db_path))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "rebuilt from 2 events" in rebuilt.stdout
    assert rebuilt.stderr == ""  # no terminal, no --progress
    shown = aj("search", "--rebuild", "--progress", "--json", "--db", str(db_path))
    assert json.loads(shown.stdout) == {"events_indexed": 2}
    assert "rebuilding the search index" in shown.stderr
    assert "2 events" in shown.stderr
    assert aj("verify", "--db", str(db_path)).returncode == 0
    assert sid in aj("search", "capybara", "--db", str(db_path)).stdout

"""`verify`, `backup`, `restore`, `export` and `import` as a user runs them: real processes on
real files, exit codes, and what ends up on disk."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentjournal import Journal, NewEvent

HELPERS = Path(__file__).parents[1] / "helpers"


def aj(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
    )


def seeded(path: Path) -> list[str]:
    """Two tenants' sessions with messages, a tool call chain, a correction and a task."""
    with Journal.open(path) as journal:
        ids = []
        for title in ("订单客服", "退款"):
            sid = journal.create_session(title, system_prompt="你是客服。").session_id
            journal.append(sid, "user_message", {"content": "帮我查一下订单数量"})
            journal.append_many(
                sid,
                [
                    NewEvent("assistant_message", {"content": ""}),
                    NewEvent("tool_call", {"call_id": "c1", "name": "count", "arguments": "{}"}),
                ],
            )
            journal.append(sid, "tool_result", {"call_id": "c1", "content": "42"})
            journal.append(sid, "assistant_message", {"content": "你当前有 42 个订单。"})
            journal.create_task(sid, "report", {"month": 11})
            ids.append(sid)
        journal.for_tenant("acme").create_session("acme's")
    return ids


@pytest.mark.parametrize("command", ["verify", "backup", "restore", "export", "import"])
def test_help_shows_an_example(command: str) -> None:
    shown = aj(command, "--help")
    assert shown.returncode == 0
    assert f"Example: agentjournal {command}" in shown.stdout


def test_verify_exit_codes_clean_differences_rebuilt_and_could_not(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    seeded(db)
    clean = aj("verify", "--db", str(db), "--json")
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert report["ok"] is True
    assert set(report["tenants"]) == {"default", "acme"}
    assert report["tenants"]["default"]["events_checked"] == 14

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET tokens = 987654 WHERE seq = 2")
    found = aj("verify", "--db", str(db), "--json")
    assert found.returncode == 1
    differences = json.loads(found.stdout)["tenants"]["default"]["differences"]
    assert {(d["table"], d["field"], d["stored"]) for d in differences} == {
        ("messages", "tokens", 987654)
    }
    assert len(differences) == 2  # one per session
    table = aj("verify", "--db", str(db))
    assert table.returncode == 1
    assert "987654" in table.stdout

    rebuilt = aj("verify", "--db", str(db), "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout
    assert aj("verify", "--db", str(db)).returncode == 0

    missing = aj("verify", "--db", str(tmp_path / "nope.db"))
    assert missing.returncode == 2
    assert "no database" in missing.stderr
    assert not (tmp_path / "nope.db").exists()


def test_verify_shows_progress_on_stderr_when_asked_never_on_stdout(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    seeded(db)
    table = aj("verify", "--db", str(db), "--progress")
    assert table.returncode == 0, table.stderr
    assert "verifying tenant default" in table.stderr
    assert "2/2 sessions" in table.stderr
    assert "1/1 sessions" in table.stderr  # acme's
    assert "verifying" not in table.stdout
    both = aj("verify", "--db", str(db), "--json", "--progress")
    assert "2/2 sessions" in both.stderr
    assert json.loads(both.stdout)["ok"] is True  # one document, untouched
    # Not a terminal, not asked: nothing but the result.
    quiet = aj("verify", "--db", str(db), "--json")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert json.loads(quiet.stdout)["ok"] is True

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET tokens = 987654 WHERE seq = 2")
    rebuilt = aj("verify", "--db", str(db), "--rebuild", "--progress")
    assert rebuilt.returncode == 0, rebuilt.stdout
    assert "checking tenant default again" in rebuilt.stderr


def with_stderr_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run the CLI with a pseudo-terminal as stderr and a pipe as stdout, as `verify | less`
    runs: (exit code, stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    received: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every copy of the terminal side is closed
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "agentjournal.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=terminal,
                text=True,
            )
        finally:
            os.close(terminal)  # the child has its own copy
        out, _ = child.communicate(timeout=120)
        reader.join(timeout=120)
    finally:
        os.close(controller)
    return child.returncode, out, b"".join(received).decode(errors="replace")


def test_verify_shows_progress_by_itself_only_when_stderr_is_a_terminal(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    seeded(db)
    code, out, terminal = with_stderr_on_a_terminal("verify", "--db", str(db))
    assert code == 0, terminal
    assert "verifying tenant default" in terminal
    assert "verifying" not in out
    assert "default" in out  # the table
    code, out, terminal = with_stderr_on_a_terminal("verify", "--db", str(db), "--json")
    assert (code, terminal) == (0, "")
    assert json.loads(out)["ok"] is True
    code, out, terminal = with_stderr_on_a_terminal("verify", "--db", str(db), "--no-progress")
    assert (code, terminal) == (0, "")


def test_backup_while_another_process_appends_restores_to_a_copy_that_verifies(
    tmp_path: Path,
) -> None:
    db, copy, restored = tmp_path / "live.db", tmp_path / "backup.db", tmp_path / "restored.db"
    Journal.open(db).close()
    argv = [sys.executable, str(HELPERS / "writer.py"), str(db), "w", "--threads", "2"]
    log = tmp_path / "writer.err"
    with log.open("w") as stderr:
        writer = subprocess.Popen(
            [*argv, "--ops", "100000", "--delay", "0.001"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and count_events(db) < 300:
            time.sleep(0.05)
        taken = aj("backup", str(copy), "--db", str(db), "--json")
        still_writing = writer.poll() is None
        after = count_events(db)
    finally:
        writer.terminate()
        writer.wait(timeout=30)
    assert taken.returncode == 0, taken.stderr
    assert still_writing, log.read_text()
    report = json.loads(taken.stdout)
    assert 300 <= report["events"] <= after

    back = aj("restore", str(copy), "--db", str(restored), "--json")
    assert back.returncode == 0, back.stderr
    assert aj("verify", "--db", str(restored)).returncode == 0
    # One snapshot: every session of the copy is a prefix of the same session in the original.
    with Journal.open(restored) as small, Journal.open(db) as full:
        for session in small.sessions(limit=1000):
            mine = small.events(session.session_id, limit=1000)
            theirs = full.events(session.session_id, limit=len(mine))
            assert [(e.seq, e.type, e.payload) for e in mine] == [
                (e.seq, e.type, e.payload) for e in theirs
            ]


def count_events(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_restore_over_a_journal_with_events_needs_force(tmp_path: Path) -> None:
    db, copy, other = tmp_path / "a.db", tmp_path / "a.bak", tmp_path / "b.db"
    seeded(db)
    assert aj("backup", str(copy), "--db", str(db)).returncode == 0
    assert aj("backup", str(copy), "--db", str(db)).returncode == 2  # exists: refused
    with Journal.open(other) as journal:
        journal.create_session("mine")
    refused = aj("restore", str(copy), "--db", str(other))
    assert refused.returncode == 2
    assert "holds 1 events" in refused.stderr
    assert count_events(other) == 1
    assert aj("restore", str(copy), "--db", str(other), "--force").returncode == 0
    assert count_events(other) == count_events(db)


def test_backup_and_restore_refuse_postgres_urls_and_point_to_pg_tools() -> None:
    url = "postgresql://127.0.0.1:5432/test"
    for argv, tool in (("backup", "pg_dump"), ("restore", "pg_restore")):
        refused = aj(argv, "x.db", "--db", url)
        assert refused.returncode == 2
        assert tool in refused.stderr


def test_export_import_round_trip_replays_identically(tmp_path: Path) -> None:
    db, copy, dump = tmp_path / "a.db", tmp_path / "copy.db", tmp_path / "events.jsonl"
    ids = seeded(db)
    exported = aj("export", str(dump), "--db", str(db))
    assert exported.returncode == 0, exported.stderr
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 14
    assert all(json.loads(line)["session_id"] in ids for line in lines)
    assert not list(tmp_path.glob(".*partial*"))

    imported = aj("import", str(dump), "--db", str(copy), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {
        "events": 14,
        "sessions_created": 2,
        "sessions_extended": 0,
    }
    with Journal.open(db) as original, Journal.open(copy) as twin:
        for sid in ids:
            assert twin.replay(sid) == original.replay(sid)
            assert [t.to_dict() for t in twin.tasks(session_id=sid)] == [
                t.to_dict() for t in original.tasks(session_id=sid)
            ]
    assert aj("verify", "--db", str(copy)).returncode == 0

    # A tenant through standard output and standard input.
    acme = aj("export", "-", "--db", str(db), "--tenant", "acme")
    assert acme.returncode == 0
    assert len(acme.stdout.splitlines()) == 1
    into = aj("import", "-", "--db", str(copy), "--tenant", "acme", stdin=acme.stdout)
    assert into.returncode == 0, into.stderr
    with Journal.open(copy, tenant="acme") as twin:
        assert [s.title for s in twin.sessions()] == ["acme's"]


def test_import_rejects_a_corrupt_line_by_number_and_writes_nothing(tmp_path: Path) -> None:
    db, copy, dump = tmp_path / "a.db", tmp_path / "copy.db", tmp_path / "events.jsonl"
    seeded(db)
    assert aj("export", str(dump), "--db", str(db)).returncode == 0
    lines = dump.read_text(encoding="utf-8").splitlines()
    lines[9] = lines[9][:-7]  # a line cut short
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")

    refused = aj("import", str(dump), "--db", str(copy))

    assert refused.returncode == 2
    assert "line 10:" in refused.stderr
    assert "nothing was imported" in refused.stderr
    assert count_events(copy) == 0


@pytest.mark.parametrize(
    "value",
    ["1" * 4301, "1e400", "18446744073709551616", '"\\ud800"', "[" * 5000],
    ids=["huge-int", "1e400", "past-64-bits", "lone-surrogate", "deep"],
)
def test_import_refuses_json_python_cannot_hold_without_a_traceback(
    tmp_path: Path, value: str
) -> None:
    db, dump = tmp_path / "a.db", tmp_path / "events.jsonl"
    line = {"session_id": "s1", "seq": 1, "type": "session_created", "payload": {"title": ""}}
    dump.write_text(json.dumps(line).replace('"seq": 1', f'"seq": 1, "created_at": {value}'))

    refused = aj("import", str(dump), "--db", str(db))

    assert refused.returncode == 2, refused.stderr
    assert "line 1:" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert count_events(db) == 0


def test_export_refuses_to_overwrite_and_unknown_sessions(tmp_path: Path) -> None:
    db, dump = tmp_path / "a.db", tmp_path / "events.jsonl"
    seeded(db)
    dump.write_text("keep me")
    assert aj("export", str(dump), "--db", str(db)).returncode == 2
    assert dump.read_text() == "keep me"
    unknown = aj("export", "-", "--db", str(db), "--session", "sess_missing")
    assert unknown.returncode == 2
    assert "sess_missing" in unknown.stderr
    only = aj("export", str(dump), "--db", str(db), "--overwrite", "--session", seeded_id(db))
    assert only.returncode == 0
    assert len(dump.read_text().splitlines()) == 7


def seeded_id(db: Path) -> str:
    with Journal.open(db) as journal:
        return journal.sessions()[0].session_id


def test_bench_measures_and_leaves_nothing_behind(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    measured = aj("bench", "--seconds", "0.2", "--writers", "2", "--dir", str(scratch), "--json")
    assert measured.returncode == 0, measured.stderr
    figures = json.loads(measured.stdout)
    assert set(figures) == {
        "append, one writer",
        "append, 2 writers",
        "append_many(100), one writer",
    }
    assert all(rate > 0 and 0 < p50 <= p99 for rate, p50, p99 in figures.values())
    assert list(scratch.iterdir()) == []

    db = tmp_path / "a.db"
    ids = seeded(db)
    assert aj("bench", "--seconds", "0.2", "--writers", "2", "--db", str(db)).returncode == 0
    with Journal.open(db) as journal:
        assert {s.session_id for s in journal.sessions(status="all")} == set(ids)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT purged_by FROM purge_audit").fetchall() == [
            ("agentjournal bench",)
        ]

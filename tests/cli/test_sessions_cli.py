"""`agentjournal sessions | show | replay | tail | compact | purge` over real databases.

Most commands run in-process through Typer's CliRunner (Click >= 8.2 keeps stdout and stderr
apart in `Result.stdout` / `Result.stderr`); the live `tail` and the purge confirmation run as
real processes, one with signals, one on a pseudo-terminal. Tests marked with `journal_url` run
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import importlib
import json
import os
import pty
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from click.testing import Result
from typer.testing import CliRunner

from agentjournal import Journal, SessionNotFound, replicate
from agentjournal.cli import app
from postgres_fixtures import ADMIN_URL

WAIT = 30.0  # seconds any process or line may take: far above need, only a failure waits it out
COMMANDS = ["sessions", "show", "replay", "tail", "compact", "purge"]


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


@dataclass(frozen=True)
class Seeded:
    """One chat with a tool call and a task at 40 %, plus an archived, a deleted and another
    tenant's session. Activity order (newest first): deleted, refund, chat."""

    url: str
    chat: str
    refund: str
    old: str
    elsewhere: str
    task_id: str


def seed(url: str) -> Seeded:
    with Journal.open(url) as journal:
        chat = journal.create_session(
            "Order help", model="gpt-test", system_prompt="You help with orders."
        ).session_id
        journal.append(chat, "user_message", {"content": "Where is order A1?"})  # 2
        journal.append(chat, "assistant_message", {"content": "Let me check."})  # 3
        journal.append(
            chat,
            "tool_call",
            {"call_id": "call_1", "name": "get_order", "arguments": '{"order_id": "A1"}'},
        )  # 4
        journal.append(chat, "tool_result", {"call_id": "call_1", "content": "SHIPPED-A1"})  # 5
        journal.append(chat, "assistant_message", {"content": "It has shipped."})  # 6
        journal.append(chat, "myapp.note", {"kept": True})  # 7
        task = journal.create_task(chat, "summarize", {"upto": 6})  # 8
        claimed = journal.claim_task("worker-1", ["summarize"])  # 9
        assert claimed is not None
        journal.task_progress(task.task_id, 0.4, attempt=claimed.attempt, message="halfway")  # 10
        refund = journal.create_session("Refund request").session_id
        journal.append(refund, "user_message", {"content": "I want my money back."})
        journal.update_session(refund, status="archived")
        old = journal.create_session("Old chat").session_id
        journal.delete_session(old)
        elsewhere = journal.for_tenant("other").create_session("Other tenant's chat").session_id
    return Seeded(url, chat, refund, old, elsewhere, task.task_id)


@pytest.fixture
def seeded(journal_url: str) -> Seeded:
    """On SQLite and PostgreSQL."""
    return seed(journal_url)


@pytest.fixture
def seeded_file(tmp_path: Path) -> Seeded:
    """On a SQLite file only."""
    return seed(str(tmp_path / "journal.db"))


# -- every command ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_an_example(command: str) -> None:
    result = ok(command, "--help")
    assert f"Example: agentjournal {command} " in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["show", "sess_missing"],
        ["replay", "sess_missing"],
        ["tail", "sess_missing", "--no-follow"],
        ["tail", "sess_missing"],
        ["compact", "sess_missing", "--until", "1", "--summary", "s"],
        ["purge", "sess_missing", "--yes"],
    ],
)
def test_a_missing_session_exits_2(seeded: Seeded, args: list[str]) -> None:
    result = run(*args, "--db", seeded.url)
    assert result.exit_code == 2, result.output
    assert "sess_missing" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ["sessions"],
        ["show", "s1"],
        ["replay", "s1"],
        ["tail", "s1", "--no-follow"],
        ["tail", "--all"],
        ["compact", "s1", "--until", "1", "--summary", "s"],
        ["purge", "s1", "--yes"],
    ],
)
def test_a_missing_database_exits_2_and_creates_no_file(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "typo.db"
    result = run(*args, "--db", str(missing))
    assert result.exit_code == 2, result.output
    assert "no database" in result.stderr
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


def test_another_tenant_sees_none_of_it(seeded: Seeded) -> None:
    db = ("--db", seeded.url)
    listed = run("sessions", "--status", "all", "--tenant", "other", "--json", *db)
    assert listed.exit_code == 0
    assert [s["session_id"] for s in json.loads(listed.stdout)] == [seeded.elsewhere]
    for args in (["show", seeded.chat], ["replay", seeded.chat], ["purge", seeded.chat, "--yes"]):
        result = run(*args, "--tenant", "other", *db)
        assert result.exit_code == 2, (args, result.output)
        assert "Order help" not in result.stdout
    nobody = run("sessions", "--status", "all", "--tenant", "nobody", "--json", *db)
    assert nobody.exit_code == 1
    assert json.loads(nobody.stdout) == []
    ok("show", seeded.chat, *db)  # the purge above was refused: still there for its tenant


# -- sessions ---------------------------------------------------------------------------------


def listed_ids(*args: str) -> list[str]:
    return [s["session_id"] for s in json.loads(ok("sessions", "--json", *args).stdout)]


def test_sessions_lists_most_recent_first_with_json(seeded: Seeded) -> None:
    db = ("--db", seeded.url)
    result = ok("sessions", "--json", *db)
    sessions = json.loads(result.stdout)
    with Journal.open(seeded.url) as journal:
        wanted = [journal.get_session(s).to_dict() for s in (seeded.refund, seeded.chat)]
    # Written here, not replicated: no source.
    assert sessions == [{**session, "source_id": None} for session in wanted]
    assert len(result.stdout.splitlines()) == 1  # one JSON document

    table = ok("sessions", *db).stdout
    assert table.index(seeded.refund) < table.index(seeded.chat)
    chat_line = next(line for line in table.splitlines() if seeded.chat in line)
    assert "Order help" in chat_line
    assert "active" in chat_line
    assert " 10 " in chat_line  # its events


def test_sessions_status_filters(seeded: Seeded) -> None:
    db = ("--db", seeded.url)
    assert listed_ids("--status", "all", *db) == [seeded.old, seeded.refund, seeded.chat]
    assert listed_ids("--status", "active", *db) == [seeded.chat]
    assert listed_ids("--status", "archived", *db) == [seeded.refund]
    assert listed_ids("--status", "deleted", *db) == [seeded.old]
    assert listed_ids("--status", "all", "--limit", "2", *db) == [seeded.old, seeded.refund]
    bad = run("sessions", "--status", "gone", *db)
    assert bad.exit_code == 2


def test_sessions_search_matches_title_or_id_in_any_case(seeded: Seeded) -> None:
    db = ("--db", seeded.url)
    assert listed_ids("--search", "REFUND", *db) == [seeded.refund]
    assert listed_ids("--search", seeded.chat[-6:].upper(), *db) == [seeded.chat]
    assert listed_ids("--search", "old", "--status", "all", *db) == [seeded.old]
    nothing = run("sessions", "--search", "no such words", *db)
    assert nothing.exit_code == 1
    assert "no sessions matched" in nothing.stderr
    assert nothing.stdout == ""


def test_sessions_search_pages_past_the_first_page(tmp_path: Path) -> None:
    # 1,200 sessions that do not match sit between the matches, and --limit takes more than
    # the default page.
    db = str(tmp_path / "journal.db")
    with Journal.open(db, durability="normal") as journal:
        wanted = [journal.create_session(f"needle {n}").session_id for n in range(3)]
        for n in range(1200):
            journal.create_session(f"hay {n}")
        wanted.append(journal.create_session("needle last").session_id)
    assert listed_ids("--search", "needle", "--db", db) == wanted[::-1]
    assert listed_ids("--search", "needle", "--limit", "2", "--db", db) == wanted[::-1][:2]
    assert len(listed_ids("--search", "hay", "--limit", "1100", "--db", db)) == 1100


def test_sessions_search_is_the_journals_and_pages_with_its_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 2 instead of MAX_PAGE: --limit 5 needs the cursor, under the same search.
    monkeypatch.setattr(importlib.import_module("agentjournal.cli.sessions"), "MAX_PAGE", 2)
    asked: list[tuple[str | None, int, str | None]] = []
    sessions = Journal.sessions

    def spy(journal: Journal, **options: Any) -> Any:
        asked.append((options.get("search"), options["limit"], options.get("cursor")))
        return sessions(journal, **options)

    monkeypatch.setattr(Journal, "sessions", spy)
    db = str(tmp_path / "journal.db")
    with Journal.open(db, durability="normal") as journal:
        wanted = []
        for n in range(6):
            wanted.append(journal.create_session(f"Nadel Ä {n}").session_id)
            journal.create_session(f"hay {n}")
    asked.clear()
    assert listed_ids("--search", "nadel ä", "--limit", "5", "--db", db) == wanted[::-1][:5]
    assert [(search, limit) for search, limit, _ in asked] == [("nadel ä", 2)] * 2 + [
        ("nadel ä", 1)
    ]
    assert [cursor is None for _, _, cursor in asked] == [True, False, False]
    assert listed_ids("--search", "NADEL", "--db", db) == wanted[::-1]


def test_sessions_search_too_long_exits_2(seeded: Seeded) -> None:
    result = run("sessions", "--search", "x" * 201, "--db", seeded.url)
    assert result.exit_code == 2, result.output
    assert "search" in result.stderr
    assert result.stdout == ""


# -- show -------------------------------------------------------------------------------------


def test_show_reads_like_a_chat_with_tool_calls_under_their_turn(seeded: Seeded) -> None:
    lines = ok("show", seeded.chat, "--db", seeded.url).stdout.splitlines()
    assert lines[0].split() == ["Order", "help", seeded.chat]
    header = " ".join(lines[1:4])
    for fact in ("active", "gpt-test", "10 events", "3 messages", "1 tool call ", "1 task "):
        assert fact in header

    turn = next(i for i, line in enumerate(lines) if "Let me check." in line)
    assert lines[turn].split()[:2] == ["#3", "assistant"]
    call, result = lines[turn + 1], lines[turn + 2]
    assert call.split()[:3] == ["#4", "↳", "tool"]
    assert call.index("↳") > lines[turn].index("assistant")  # indented under the turn
    assert 'get_order {"order_id": "A1"}' in call
    assert "→ ok #5: SHIPPED-A1" in result
    assert not any(line.split()[:1] == ["#5"] for line in lines)  # the result sits under it
    assert lines[turn + 3].split()[:2] == ["#6", "assistant"]
    assert any(line.split()[:4] == ["#7", "event", "myapp.note", '{"kept":'] for line in lines)

    bar = lines[lines.index("Tasks") + 1]
    assert "40%" in bar
    assert "━" * 8 in bar
    assert "━" * 9 not in bar  # 40 % of a 20-cell bar
    assert "summarize" in bar
    assert "running" in bar
    assert "attempt 1" in bar
    below = lines[lines.index(bar) + 1]
    assert seeded.task_id in below
    assert "halfway" in below


def test_show_json_is_session_events_tool_calls_tasks(seeded: Seeded) -> None:
    shown = json.loads(ok("show", seeded.chat, "--db", seeded.url, "--json").stdout)
    assert set(shown) == {"session", "events", "tool_calls", "tasks"}
    with Journal.open(seeded.url) as journal:
        assert shown["session"] == journal.get_session(seeded.chat).to_dict()
        assert shown["events"] == [e.to_dict() for e in journal.events(seeded.chat)]
        assert shown["tool_calls"] == [c.to_dict() for c in journal.tool_calls(seeded.chat)]
        assert shown["tasks"] == [t.to_dict() for t in journal.tasks(session_id=seeded.chat)]
    assert [e["seq"] for e in shown["events"]] == list(range(1, 11))
    assert shown["tool_calls"][0]["result"] == "SHIPPED-A1"
    assert shown["tasks"][0]["progress"] == 0.4


def test_show_reads_part_of_a_long_session_with_last_before_and_around(seeded: Seeded) -> None:
    def seqs(*args: str) -> list[int]:
        shown = json.loads(ok("show", seeded.chat, "--db", seeded.url, "--json", *args).stdout)
        return [e["seq"] for e in shown["events"]]

    assert seqs("--last", "3") == [8, 9, 10]
    assert seqs("--before", "5", "--last", "2") == [3, 4]
    assert seqs("--before", "4") == [1, 2, 3]
    assert seqs("--around", "5", "--last", "3") == [4, 5, 6]
    windowed = json.loads(
        ok("show", seeded.chat, "--db", seeded.url, "--json", "--last", "1").stdout
    )
    assert windowed["tool_calls"] == [], "only the calls of the events shown"
    text = ok("show", seeded.chat, "--db", seeded.url, "--last", "3").stdout
    assert "showing events #8-#10 of 10" in text
    refused = run("show", seeded.chat, "--db", seeded.url, "--around", "3", "--before", "5")
    assert refused.exit_code != 0
    assert "not both" in refused.output


def test_show_opens_a_long_session_at_its_newest_page_and_says_how_to_see_more(
    journal_url: str,
) -> None:
    with Journal.open(journal_url) as journal:
        sid = journal.create_session("Long chat").session_id
        journal.append_many(
            sid, [{"type": "user_message", "payload": {"content": f"m{n}"}} for n in range(2, 121)]
        )
    db = ("--db", journal_url)

    def seqs(*args: str) -> list[int]:
        shown = json.loads(ok("show", sid, "--json", *args, *db).stdout)
        return [e["seq"] for e in shown["events"]]

    text = ok("show", sid, *db)
    starts = [line.split()[0] for line in text.stdout.splitlines() if line.lstrip()[:1] == "#"]
    assert starts == [f"#{seq}" for seq in range(71, 121)]
    assert "showing events #71-#120 of 120" in text.stdout
    assert text.stderr.splitlines() == [
        "showing the newest 50 of 120 events; for more: --last N, --before 71, --after SEQ,"
        " or --all"
    ]
    paged = ok("show", sid, "--json", *db)
    assert [e["seq"] for e in json.loads(paged.stdout)["events"]] == list(range(71, 121))
    assert "--all" in paged.stderr  # the hint never enters the document on stdout

    everything = ok("show", sid, "--all", *db)
    assert everything.stderr == ""
    assert "m2" in everything.stdout
    assert "119 messages" in everything.stdout  # the whole session was read (seq 2-120)
    assert seqs("--all") == list(range(1, 121))
    assert seqs("--after", "100") == list(range(101, 121))
    assert seqs("--after", "10", "--last", "5") == [11, 12, 13, 14, 15]
    assert seqs("--after", "0", "--last", "2") == [1, 2]
    assert seqs("--before", "71", "--last", "3") == [68, 69, 70]
    assert ok("show", sid, "--last", "5", *db).stderr == ""  # asked for a window: no hint

    for wrong in (["--all", "--last", "5"], ["--all", "--after", "3"]):
        refused = run("show", sid, *wrong, *db)
        assert refused.exit_code == 2, wrong
        assert "--all shows every event" in refused.stderr
        assert refused.stdout == ""
    both = run("show", sid, "--after", "5", "--before", "9", *db)
    assert both.exit_code == 2
    assert "give --before or --after, not both" in both.stderr


def test_show_prints_a_short_session_whole_without_a_hint(seeded: Seeded) -> None:
    shown = ok("show", seeded.chat, "--db", seeded.url)
    assert shown.stderr == ""
    assert "showing" not in shown.stdout


def test_show_marks_corrections_compactions_and_session_updates(seeded_file: Seeded) -> None:
    sid = seeded_file.chat
    with Journal.open(seeded_file.url) as journal:
        journal.append(sid, "user_message", {"content": "Where is order A2?", "supersedes": 2})
        journal.compact(sid, 6, "Asked about A1: shipped.")
        journal.update_session(sid, title="Renamed [bold]x[/]")
    lines = ok("show", sid, "--db", seeded_file.url).stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in (["#11"], ["#12"])}
    assert "(corrects #2) Where is order A2?" in rows["#11"]
    assert "compacted" in rows["#12"]
    assert "up to #6: Asked about A1: shipped." in rows["#12"]
    updated = next(line for line in lines if line.split()[:1] == ["#13"])
    assert updated.split()[1] == "session"
    assert 'updated title = "Renamed [bold]x[/]"' in updated  # markup shown, not interpreted


# -- replay -----------------------------------------------------------------------------------


def test_replay_json_is_exactly_the_library_replay(seeded: Seeded) -> None:
    db = ("--db", seeded.url)
    with Journal.open(seeded.url) as journal:
        for extra, kwargs in (
            ([], {}),
            (["--until", "4"], {"until": 4}),
            (["--until", "5", "--format", "anthropic"], {"until": 5, "format": "anthropic"}),
            (["--format", "openai"], {}),
            (["--format", "responses"], {"format": "responses"}),
        ):
            printed = json.loads(ok("replay", seeded.chat, "--json", *extra, *db).stdout)
            assert printed == journal.replay(seeded.chat, **kwargs), extra  # type: ignore[arg-type]
    anthropic = json.loads(ok("replay", seeded.chat, "--json", "--format", "anthropic", *db).stdout)
    assert anthropic["system"] == "You help with orders."
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user", "assistant"]
    early = json.loads(ok("replay", seeded.chat, "--json", "--until", "3", *db).stdout)
    assert [m["content"] for m in early] == [
        "You help with orders.",
        "Where is order A1?",
        "Let me check.",
    ]


def test_replay_shows_roles_and_contents(seeded: Seeded) -> None:
    lines = ok("replay", seeded.chat, "--db", seeded.url).stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        "system",
        "user",
        "assistant",
        "→",
        "tool",
        "assistant",
    ]
    assert "get_order" in lines[3]
    assert "[call_1] SHIPPED-A1" in lines[4]
    until = ok("replay", seeded.chat, "--until", "2", "--db", seeded.url).stdout.splitlines()
    assert [line.split()[0] for line in until] == ["system", "user"]
    anthropic = ok("replay", seeded.chat, "--format", "anthropic", "--db", seeded.url).stdout
    assert "tool_result" not in anthropic
    assert "[call_1] SHIPPED-A1" in anthropic
    assert anthropic.splitlines()[0].split()[0] == "system"


def test_replay_refuses_a_bad_until_or_format(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    assert run("replay", seeded_file.chat, "--until", "0", *db).exit_code == 2
    assert run("replay", seeded_file.chat, "--format", "gemini", *db).exit_code == 2


# -- compact ----------------------------------------------------------------------------------


def test_compact_appends_the_summary_and_replay_starts_from_it(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    args = ("compact", seeded_file.chat, "--until", "6", "--summary", "Order A1 shipped.")
    event = json.loads(ok(*args, "--json", *db).stdout)
    assert event["type"] == "context_compacted"
    assert event["seq"] == 11
    assert event["payload"] == {"summary": "Order A1 shipped.", "until_seq": 6}
    with Journal.open(seeded_file.url) as journal:
        assert journal.events(seeded_file.chat, after=10)[0].to_dict() == event
        assert journal.replay(seeded_file.chat)[:2] == [  # type: ignore[index]
            {"role": "system", "content": "You help with orders."},
            {"role": "system", "content": "Order A1 shipped."},
        ]
    again = ok("compact", seeded_file.chat, "--until", "8", "--summary", "More.", *db).stdout
    assert again.split()[:1] == ["#12"]
    assert "context_compacted up to #8: More." in again
    refused = run("compact", seeded_file.chat, "--until", "99", "--summary", "x", *db)
    assert refused.exit_code == 2
    assert "until_seq" in refused.stderr


# -- tail (in-process: the backlog) -----------------------------------------------------------


def test_tail_no_follow_prints_the_backlog_after_a_seq(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    printed = ok("tail", seeded_file.chat, "--after", "6", "--no-follow", "--json", *db).stdout
    with Journal.open(seeded_file.url) as journal:
        expected = [e.to_dict() for e in journal.events(seeded_file.chat, after=6)]
    assert [json.loads(line) for line in printed.splitlines()] == expected

    lines = ok("tail", seeded_file.chat, "--after", "1", "--no-follow", *db).stdout.splitlines()
    assert len(lines) == 9
    assert lines[0].startswith("#2 ")
    assert "user_message Where is order A1?" in lines[0]
    assert "tool_call get_order" in lines[2]
    assert lines[8].startswith("#10 ")
    assert "task_progress" in lines[8]


def test_tail_last_starts_with_the_newest_events(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    printed = ok("tail", seeded_file.chat, "--last", "2", "--no-follow", "--json", *db).stdout
    assert [json.loads(line)["seq"] for line in printed.splitlines()] == [9, 10]
    refused = run("tail", seeded_file.chat, "--last", "2", "--after", "3", *db)
    assert refused.exit_code != 0
    assert "--last" in refused.output


def test_tail_all_no_follow_prints_the_feed_after_a_position(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    feed = [
        json.loads(line)
        for line in ok("tail", "--all", "--no-follow", "--json", *db).stdout.splitlines()
    ]
    with Journal.open(seeded_file.url) as journal:
        assert feed == [e.to_dict() for e in journal.events_all(limit=1000)]
    assert {e["session_id"] for e in feed} == {
        seeded_file.chat,
        seeded_file.refund,
        seeded_file.old,
    }  # not the other tenant's
    middle = feed[5]["position"]
    after = ok("tail", "--all", "--after", middle, "--no-follow", "--json", *db).stdout
    assert [json.loads(line) for line in after.splitlines()] == feed[6:]
    human = ok("tail", "--all", "--after", middle, "--no-follow", *db).stdout.splitlines()
    assert human[0].startswith(f"@{feed[6]['position']} {seeded_file.chat} #7 ")


def test_tail_refuses_bad_arguments(seeded_file: Seeded) -> None:
    db = ("--db", seeded_file.url)
    for args in (
        [],
        [seeded_file.chat, "--all"],
        [seeded_file.chat, "--after", "seven"],
        ["--all", "--after", "not-a-position"],
    ):
        result = run("tail", *args, "--no-follow", *db)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error:")


def test_tail_of_a_deleted_session_ends_after_its_backlog(seeded_file: Seeded) -> None:
    printed = ok("tail", seeded_file.old, "--json", "--db", seeded_file.url).stdout
    events = [json.loads(line) for line in printed.splitlines()]
    assert events[-1]["payload"] == {"status": "deleted"}


# -- tail (a real process, following) ---------------------------------------------------------


class Lines:
    """A child's stdout read on a thread, so every wait for a line is bounded."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._queue.put(line)

    def take(self, count: int) -> list[dict[str, Any]]:
        return [json.loads(self._queue.get(timeout=WAIT)) for _ in range(count)]

    def rest(self) -> list[str]:
        self._thread.join(timeout=WAIT)
        return list(self._queue.queue)


@pytest.fixture
def spawn() -> Iterator[Any]:
    children: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-m", "agentjournal.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=WAIT)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("scope", ["session", "all"])
def test_tail_follows_live_appends_and_stops_cleanly_on_a_signal(
    seeded_file: Seeded, spawn: Any, stop: signal.Signals, scope: str
) -> None:
    with Journal.open(seeded_file.url) as journal:
        if scope == "session":
            target = [seeded_file.chat, "--after", "7"]
            backlog = journal.events(seeded_file.chat, after=7)
        else:
            feed = journal.events_all(limit=1000)
            target = ["--all", "--after", feed[-4].position]
            backlog = feed[-3:]
        tail = spawn("tail", *target, "--json", "--db", seeded_file.url)
        lines = Lines(tail)
        assert lines.take(len(backlog)) == [e.to_dict() for e in backlog]

        live = [
            journal.append(seeded_file.chat, "user_message", {"content": f"live {n}"})
            for n in range(3)
        ]
        assert lines.take(3) == [e.to_dict() for e in live]

    tail.send_signal(stop)
    code = tail.wait(timeout=WAIT)
    assert tail.stderr is not None
    errors = tail.stderr.read()
    assert code == 0, errors
    assert "Traceback" not in errors
    assert lines.rest() == []  # nothing printed twice or after


# -- purge ------------------------------------------------------------------------------------


def rows_naming(url: str, session_id: str) -> dict[str, int]:
    """Table -> how many of its rows mention the session id in any column."""
    if url.startswith("postgresql://"):
        return _pg_rows_naming(url, session_id)
    found: dict[str, int] = {}
    with closing(sqlite3.connect(url)) as db:
        tables = [
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for table in tables:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            where = " OR ".join(f"CAST({c} AS TEXT) LIKE ?" for c in columns)
            (count,) = db.execute(
                f"SELECT count(*) FROM {table} WHERE {where}", [f"%{session_id}%"] * len(columns)
            ).fetchone()
            if count:
                found[table] = count
    return found


def _pg_rows_naming(url: str, session_id: str) -> dict[str, int]:
    schema = parse_qs(urlsplit(url).query)["schema"][0]
    found: dict[str, int] = {}
    with psycopg.connect(ADMIN_URL, autocommit=True) as db:  # the admin: no row-level security
        tables = [
            name
            for (name,) in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                " AND table_type = 'BASE TABLE'",
                (schema,),
            )
        ]
        for table in tables:
            count = db.execute(
                f'SELECT count(*) FROM "{schema}"."{table}" t WHERE t::text LIKE %s',
                (f"%{session_id}%",),
            ).fetchone()
            if count and count[0]:
                found[table] = count[0]
    return found


def test_purge_yes_leaves_only_the_audit_row(seeded: Seeded) -> None:
    before = rows_naming(seeded.url, seeded.chat)
    for table in ("sessions", "events", "messages", "tool_calls", "tasks"):
        assert before.get(table), (table, before)  # the scan sees each of them
    refund_before = rows_naming(seeded.url, seeded.refund)

    args = ("purge", seeded.chat, "--yes", "--actor", "ticket-4711", "--db", seeded.url)
    printed = json.loads(ok(*args, "--json").stdout)
    assert printed == {"session_id": seeded.chat, "events_deleted": 10, "actor": "ticket-4711"}

    assert rows_naming(seeded.url, seeded.chat) == {"purge_audit": 1}
    assert rows_naming(seeded.url, seeded.refund) == refund_before  # the others are whole
    with Journal.open(seeded.url) as journal, pytest.raises(SessionNotFound):
        journal.get_session(seeded.chat)
    gone = run("show", seeded.chat, "--db", seeded.url)
    assert gone.exit_code == 2


def test_purge_records_who_asked(seeded_file: Seeded) -> None:
    result = ok("purge", seeded_file.refund, "--yes", "--db", seeded_file.url)
    assert f"purged {seeded_file.refund}: 3 events deleted" in result.stdout
    with closing(sqlite3.connect(seeded_file.url)) as db:
        audit = db.execute(
            "SELECT purged_by, event_count FROM purge_audit WHERE session_id = ?",
            (seeded_file.refund,),
        ).fetchall()
    assert len(audit) == 1
    actor, count = audit[0]
    assert actor.startswith("cli")
    assert count == 3


def test_purge_without_yes_and_no_terminal_is_refused(seeded: Seeded) -> None:
    before = rows_naming(seeded.url, seeded.chat)
    result = run("purge", seeded.chat, "--db", seeded.url)  # CliRunner's stdin is no terminal
    assert result.exit_code == 1
    assert "--yes" in result.stderr
    assert rows_naming(seeded.url, seeded.chat) == before
    assert "purge_audit" not in before


def on_a_terminal(*args: str, answer: str) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin, type `answer`, return (exit code, stdout)."""
    controller, terminal = pty.openpty()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "agentjournal.cli", *args],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(controller, answer.encode() + b"\n")
        out, _ = child.communicate(timeout=WAIT)
    finally:
        os.close(terminal)
        os.close(controller)
    return child.returncode, out


def test_purge_asks_on_a_terminal_and_a_no_keeps_everything(seeded_file: Seeded) -> None:
    before = rows_naming(seeded_file.url, seeded_file.chat)
    code, out = on_a_terminal("purge", seeded_file.chat, "--db", seeded_file.url, answer="n")
    assert "Purge" in out
    assert "cannot be undone" in out
    assert code == 1
    assert rows_naming(seeded_file.url, seeded_file.chat) == before


def test_purge_asks_on_a_terminal_and_a_yes_purges(seeded_file: Seeded) -> None:
    code, out = on_a_terminal("purge", seeded_file.chat, "--db", seeded_file.url, answer="y")
    assert code == 0, out
    assert "10 events deleted" in out
    assert rows_naming(seeded_file.url, seeded_file.chat) == {"purge_audit": 1}


def test_sessions_and_search_name_the_source_of_replicated_sessions(tmp_path: Path) -> None:
    central = tmp_path / "central.db"
    with Journal.open(tmp_path / "laptop.db") as laptop:
        edge = laptop.create_session("from the laptop").session_id
        laptop.append(edge, "user_message", {"content": "the kestrel landed"})
        source_id = laptop.source_id()
        replicate(laptop, central, tenant="fleet")
    with Journal.open(central, tenant="fleet") as journal:
        local = journal.create_session("written here").session_id
        journal.append(local, "user_message", {"content": "another kestrel"})

    listed = json.loads(run("sessions", "--db", str(central), "--tenant", "fleet", "--json").stdout)
    assert {s["session_id"]: s["source_id"] for s in listed} == {edge: source_id, local: None}
    table = CliRunner().invoke(
        app, ["sessions", "--db", str(central), "--tenant", "fleet"], env={"COLUMNS": "200"}
    )
    assert "Source" in table.stdout
    (edge_line,) = [line for line in table.stdout.splitlines() if edge in line]
    assert source_id in edge_line
    (local_line,) = [line for line in table.stdout.splitlines() if local in line]
    assert source_id not in local_line

    found = run("search", "--db", str(central), "--tenant", "fleet", "kestrel", "--json")
    hits = json.loads(found.stdout)["hits"]
    assert {h["session_id"]: h["source_id"] for h in hits} == {edge: source_id, local: None}
    printed = run("search", "--db", str(central), "--tenant", "fleet", "kestrel").stdout
    assert f"from {source_id}" in printed
    # The default tenant has none of it; a journal that was never a target shows no column.
    assert run("sessions", "--db", str(central)).exit_code == 1
    plain = run("sessions", "--db", str(tmp_path / "laptop.db")).stdout
    assert "Source" not in plain

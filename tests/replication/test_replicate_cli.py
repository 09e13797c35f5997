"""`agentjournal replicate` and `replication-status` as an operator runs them: real processes on
real files, exit codes, summaries, following with metrics, and Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentjournal import Journal, SessionNotFound


def aj(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def edge(tmp_path: Path) -> Path:
    path = tmp_path / "edge.db"
    with Journal.open(path) as journal:
        sid = journal.create_session("订单客服", session_id="user-42").session_id
        journal.append(sid, "user_message", {"content": "你好"})
        journal.create_session("other", session_id="other")
    return path


@pytest.mark.parametrize("command", ["replicate", "replication-status"])
def test_help_shows_an_example(command: str) -> None:
    shown = aj(command, "--help")
    assert shown.returncode == 0
    assert f"Example: agentjournal {command}" in shown.stdout


def test_catch_up_prints_a_summary_and_a_second_run_finds_nothing(
    edge: Path, tmp_path: Path
) -> None:
    central = tmp_path / "central.db"

    first = aj("replicate", str(edge), str(central), "--tenant", "laptop-7")
    again = aj("replicate", str(edge), str(central), "--tenant", "laptop-7", "--json")

    assert first.returncode == 0, first.stderr
    assert "replicated 3 events (3 appended, 0 skipped, 0 purges followed)" in first.stdout
    assert "into tenant 'laptop-7'" in first.stdout
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["events_read"], summary["position"]) == (0, "3")
    with Journal.open(central, tenant="laptop-7") as target:
        assert target.messages("user-42")[0].content == "你好"
        assert target.verify().ok


def test_a_conflict_is_reported_and_exits_1(edge: Path, tmp_path: Path) -> None:
    central = tmp_path / "central.db"
    with Journal.open(central) as target:
        target.create_session("someone else's", session_id="user-42")

    done = aj("replicate", str(edge), str(central))
    status = aj("replication-status", "--db", str(central), "--json")

    assert done.returncode == 1
    assert "replicated 3 events (1 appended, 2 skipped" in done.stdout
    assert "conflict: session user-42 is another session's in the target; skipped" in done.stderr
    assert status.returncode == 1
    shown = json.loads(status.stdout)
    assert [(s["session_id"], s["state"]) for s in shown["sessions"]] == [("user-42", "conflict")]
    assert shown["sources"][0]["events"] == 3


def test_a_missing_source_is_refused_without_creating_it(tmp_path: Path) -> None:
    done = aj("replicate", str(tmp_path / "nope.db"), str(tmp_path / "central.db"))
    assert done.returncode == 2
    assert "nope.db" in done.stderr
    assert not (tmp_path / "nope.db").exists()


def test_follow_applies_new_events_keeps_metrics_and_ends_on_ctrl_c(
    edge: Path, tmp_path: Path
) -> None:
    central, metrics = tmp_path / "central.db", tmp_path / "replication.prom"
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentjournal.cli",
            "replicate",
            str(edge),
            str(central),
            "--follow",
            "--metrics-file",
            str(metrics),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with Journal.open(edge) as source:
            source.append("other", "user_message", {"content": "live"})
        while last_seq(central, "other") < 2:
            assert follower.poll() is None, follower.communicate()
            time.sleep(0.05)
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert "replicated 4 events" in out
    assert "lag" in out  # a line per batch
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.read_text(encoding="utf-8").splitlines()
        if not line.startswith("#")
    }
    assert values["agentjournal_replication_events_read_total"] == 4
    assert values["agentjournal_replication_batches_total"] >= 1
    assert values["agentjournal_replication_errors_total"] == 0
    assert "agentjournal_replication_lag_seconds" in values


def last_seq(path: Path, session_id: str) -> int:
    if not path.exists():
        return 0
    with Journal.open(path) as journal:
        try:
            return journal.get_session(session_id).last_seq
        except SessionNotFound:
            return 0

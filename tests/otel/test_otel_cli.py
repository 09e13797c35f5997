"""`agentjournal otel-export` as a user runs it: a child process sending to the test's OTLP/HTTP
receiver, once or following the journal until SIGTERM; its mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.demo.order_agent import QUERY_ORDERS, build
from helpers.otlp_receiver import Receiver, otlp_receiver

WAIT = 60.0  # seconds a wait may take before the test fails instead of hanging


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def command(db: str, endpoint: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentjournal.cli",
        "otel-export",
        "--db",
        db,
        "--otlp-endpoint",
        endpoint,
        *extra,
    ]


def child_env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": src}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=WAIT, env=child_env(), check=False
    )


def test_one_run_sends_every_ended_turn_and_the_next_only_what_is_new(
    journal_url: str, receiver: Receiver
) -> None:
    agent = build()
    with Journal.open(journal_url) as journal:
        session = agent.create_session(journal, model="scripted").session_id
        agent.run_turn(journal, session, QUERY_ORDERS)
    base = receiver.url.removesuffix("/v1/traces")  # a base URL gets /v1/traces
    done = run(*command(journal_url, base, "--json"))
    assert done.returncode == 0, done.stderr
    *batches, summary = [json.loads(line) for line in done.stdout.splitlines()]
    assert batches == [{"batch": 4, "spans": 4}]
    assert (summary["spans"], summary["open_turns"]) == (4, 0)
    assert len(receiver.unique()) == 4
    again = run(*command(journal_url, receiver.url))
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("exported 0 spans")
    assert {s.resource["service.name"] for s in receiver.spans} == {"agentjournal"}


def test_follow_exports_turns_as_they_end_and_stops_on_sigterm(
    db_path: Path, receiver: Receiver
) -> None:
    agent = build()
    with Journal.open(db_path) as journal:
        session = agent.create_session(journal).session_id
        child = subprocess.Popen(
            command(str(db_path), receiver.url, "--follow", "--capture-content", "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        try:
            agent.run_turn(journal, session, "你好")
            deadline = time.monotonic() + WAIT
            while len(receiver.unique()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(receiver.unique()) == 2
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate(timeout=WAIT)
        finally:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["spans"] == 2
    assert any("你好" in str(s.attributes) for s in receiver.spans)  # --capture-content


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("ftp://collector:4318", "--otlp-endpoint must be an http:// or https:// URL"),
        ("localhost:4318", "--otlp-endpoint must be an http:// or https:// URL"),
    ],
)
def test_a_bad_endpoint_is_one_line_and_exit_2(db_path: Path, endpoint: str, message: str) -> None:
    Journal.open(db_path).close()
    done = run(*command(str(db_path), endpoint))
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_bad_exporter_name_is_one_line_and_writes_nothing(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        before = journal.events_all(limit=1000)
    done = run(*command(str(db_path), "http://127.0.0.1:4318", "--name", "no spaces please"))
    assert done.returncode == 2
    assert "exporter name must be" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with Journal.open(db_path) as journal:
        assert journal.events_all(limit=1000) == before


def test_checkpoint_db_keeps_the_checkpoint_out_of_the_journal_read(
    tmp_path: Path, receiver: Receiver
) -> None:
    source, keeper = tmp_path / "replica.db", tmp_path / "checkpoints.db"
    agent = build()
    with Journal.open(source) as journal:
        agent.run_turn(journal, agent.create_session(journal).session_id, "你好")
        before = journal.events_all(limit=1000)
    for _ in range(2):
        done = run(*command(str(source), receiver.url, "--checkpoint-db", str(keeper)))
        assert done.returncode == 0, done.stderr
    assert len(receiver.spans) == 2
    with Journal.open(source) as journal:
        assert journal.events_all(limit=1000) == before
    with Journal.open(keeper) as journal:
        assert [s.session_id for s in journal.sessions()] == ["otel-export.default"]


def test_a_missing_database_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    done = run(*command(str(missing), "http://127.0.0.1:4318"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_drops_the_spans_is_a_failed_export(
    db_path: Path, receiver: Receiver, status: int
) -> None:
    # HTTP clients follow these redirects with a GET and no body: a 200 there (a proxy's sign-in
    # page) must not count as delivered, or the checkpoint would move past spans never received.
    agent = build()
    with Journal.open(db_path) as journal:
        agent.run_turn(journal, agent.create_session(journal).session_id, QUERY_ORDERS)
    receiver.redirect = (status, "/sign-in")
    failed = run(*command(str(db_path), receiver.url))
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr
    assert f"redirect ({status})" in failed.stderr
    assert receiver.spans == []
    receiver.redirect = None
    done = run(*command(str(db_path), receiver.url, "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["spans"] == 4
    assert len(receiver.unique()) == 4


def test_a_redirect_that_keeps_the_request_is_followed(db_path: Path, receiver: Receiver) -> None:
    agent = build()
    with Journal.open(db_path) as journal:
        agent.run_turn(journal, agent.create_session(journal).session_id, QUERY_ORDERS)
    receiver.redirect = (308, "/v2/traces")  # the same POST, body and all, elsewhere
    done = run(*command(str(db_path), receiver.url, "--json"))
    assert done.returncode == 0, done.stderr
    assert len(receiver.unique()) == 4

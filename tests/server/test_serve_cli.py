"""`agentjournal serve` and `agentjournal keys` as processes: the loopback-only rule without keys,
what serve says once it listens (and its access log), its refusals as one line, key creation /
listing / revocation against a running server, and graceful SIGTERM."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from httpx_sse import connect_sse

from agentjournal import Journal
from postgres_fixtures import ADMIN_URL, HOST, ROLE, fresh_schema, owner_url_for, url_for

Running = Any  # conftest's RunningServer (fixtures only)
CLI_TIMEOUT = 60.0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# `create_app(journal)` under uvicorn on every interface: what a program embedding the app may
# do, past the CLI's refusal to bind. argv: db, port.
_APP_ON_ALL_INTERFACES = """
import sys
import uvicorn
from agentjournal.journal import Journal
from agentjournal.server import create_app
app = create_app(Journal.open(sys.argv[1]))
uvicorn.run(app, host="0.0.0.0", port=int(sys.argv[2]), log_level="warning")
"""


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine other than loopback; None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # UDP: picks the route, sends nothing
        except OSError:
            return None
        address = str(sock.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


@contextlib.contextmanager
def serving(
    db_path: Path, host: str, port: int, argv: list[str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """`agentjournal serve` (or `argv`) as a child; SIGTERM (then SIGKILL) when the block ends."""
    if argv is None:
        argv = [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(db_path)]
        argv += ["--host", host, "--port", str(port)]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        if process.stdout is not None:
            process.stdout.close()


# -- binding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_without_keys_serve_refuses_a_non_loopback_host(tmp_path: Path, host: str) -> None:
    db_path = tmp_path / "journal.db"
    with serving(db_path, host, free_port()) as process:
        try:
            code = process.wait(timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve --host {host} without keys kept running")
        assert process.stdout is not None
        output = process.stdout.read()
    assert code != 0
    assert "refusing to bind" in output
    assert host in output
    assert "no API keys" in output
    assert "--host 127.0.0.1" in output  # names the flag that fixes it
    assert "keys create" in output  # says how to fix it
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


def test_without_keys_serve_refuses_before_touching_a_postgresql_database() -> None:
    # As the owner, who could create and migrate the schema: the refusal must come first.
    with fresh_schema("refused", migrated=False) as schema:
        result = cli("serve", "--db", owner_url_for(schema), "--host", "0.0.0.0", "--port", "1")
        assert result.returncode == 2, result.stdout + result.stderr
        assert "refusing to bind 0.0.0.0" in result.stderr
        # Refused first: no schema created, no migration run.
        with psycopg.connect(ADMIN_URL) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()
        assert found == (0,)


def test_serve_binds_a_non_loopback_host_of_a_postgresql_database_with_a_key() -> None:
    with fresh_schema("keyed") as schema:
        url = url_for(schema)
        created = cli("keys", "create", "--tenant", "acme", "--db", url)
        assert created.returncode == 0, created.stderr
        port = free_port()
        argv = [sys.executable, "-m", "agentjournal.cli", "serve", "--db", url]
        with serving(
            Path(), "0.0.0.0", port, [*argv, "--host", "0.0.0.0", "--port", str(port)]
        ) as process:
            base = f"http://127.0.0.1:{port}"

            def up() -> bool:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                with contextlib.suppress(httpx.TransportError):
                    return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
                return False

            wait_until(up, "the server to answer")
            assert httpx.get(f"{base}/v1/sessions", timeout=5).status_code == 401


def test_with_a_key_serve_binds_a_non_loopback_host(tmp_path: Path) -> None:
    db_path = tmp_path / "journal.db"
    created = cli("keys", "create", "--tenant", "acme", "--db", str(db_path))
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    port = free_port()
    # Bound to 0.0.0.0, reached only through loopback: no traffic leaves the machine.
    with serving(db_path, "0.0.0.0", port) as process:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert process.poll() is None, "serve exited"
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            return False

        wait_until(up, "the server to answer")
        assert httpx.get(f"{base}/v1/sessions", timeout=5).status_code == 401
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{base}/v1/sessions", headers=headers, timeout=5).status_code == 200


# -- what serve says -------------------------------------------------------------------------

BANNER_LINES = 6  # serving, inspector, database, auth, agent, access log


@dataclass
class Served:
    banner: list[str]  # what serve printed to stderr once listening
    stdout: str = ""  # all it printed there, once it has exited
    returncode: int | None = None


@contextlib.contextmanager
def serve_process(*args: str) -> Iterator[Served]:
    """`agentjournal serve ARGS` on a port the kernel picks, once it printed its banner;
    SIGTERM when the block ends."""
    argv = [sys.executable, "-m", "agentjournal.cli", "serve", "--port", "0", *args]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or ()])
    reader.start()
    served = Served([])
    try:
        while len(served.banner) < BANNER_LINES:
            try:
                served.banner.append(lines.get(timeout=CLI_TIMEOUT).rstrip("\n"))
            except queue.Empty:
                pytest.fail(f"no banner from serve; stderr so far: {served.banner}")
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            served.returncode = process.wait(timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=CLI_TIMEOUT)
        served.stdout = process.stdout.read()  # a few lines: the pipe never filled meanwhile
        reader.join(timeout=CLI_TIMEOUT)
        process.stdout.close()
        process.stderr.close()


def field(banner: list[str], label: str) -> str:
    """The value of the banner's line `  <label> <value>`."""
    [value] = [line[2 + len(label) :] for line in banner[1:] if line[2:].startswith(label + " ")]
    return value.strip()


@pytest.mark.parametrize("access_log", [False, True])
def test_serve_says_where_it_listens_once_it_does(tmp_path: Path, access_log: bool) -> None:
    db_path = tmp_path / "journal.db"
    flags = ["--access-log"] if access_log else []
    with serve_process("--db", str(db_path), *flags) as served:
        banner = served.banner
        first = banner[0]
        assert first.startswith("agentjournal is serving http://127.0.0.1:"), banner
        base = first.split()[3]
        # Printed once listening: the address answers at once, and it is the inspector's too.
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert f"{base}/v1" in first
        assert field(banner, "inspector") == f"{base}/"
        page = httpx.get(f"{base}/", timeout=5)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert field(banner, "database") == f"SQLite {db_path.resolve()}"
        assert field(banner, "auth").startswith("open: no API keys yet, so loopback callers only")
        assert field(banner, "agent") == "none"
        assert field(banner, "access log").startswith("on" if access_log else "off (--access-log")
    assert served.returncode == 0
    if access_log:
        assert '"GET /healthz HTTP/1.1" 200' in served.stdout
        assert '"GET / HTTP/1.1" 200' in served.stdout
    else:
        assert "GET" not in served.stdout


def test_serve_names_a_postgresql_database_and_its_keys_but_never_the_password() -> None:
    with fresh_schema("banner") as schema:
        url = f"postgresql://{ROLE}:not-a-real-s3cret@{HOST}?schema={schema}"  # trust: unused
        created = cli("keys", "create", "--tenant", "acme", "--db", url)
        assert created.returncode == 0, created.stderr
        with serve_process("--db", url, "--agent", "demo") as served:
            banner = served.banner
            assert field(banner, "database") == f"PostgreSQL {HOST}, schema {schema}, as {ROLE}"
            assert field(banner, "auth") == "API keys: every request needs one"
            assert field(banner, "agent") == "demo"
            assert not any("s3cret" in line for line in banner)


def one_line_refusal(result: subprocess.CompletedProcess[str], *names: str) -> None:
    shown = result.stdout + result.stderr
    assert result.returncode == 2, shown
    assert "Traceback" not in shown
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    for name in names:
        assert name in line, shown


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = cli("serve", "--db", str(tmp_path / "journal.db"), "--port", port)
    one_line_refusal(result, f"port {port}", "in use", "--port")
    assert list(tmp_path.iterdir()) == []  # refused before the database was created


def test_serve_agent_openai_without_a_model_name_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENTJOURNAL_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = cli("serve", "--db", str(tmp_path / "journal.db"), "--agent", "openai")
    one_line_refusal(result, "--agent openai", "AGENTJOURNAL_MODEL")
    assert list(tmp_path.iterdir()) == []


def test_serve_agent_openai_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    hidden = "import sys; sys.modules['openai'] = None; from agentjournal.cli import main; main()"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            hidden,
            "serve",
            "--db",
            str(tmp_path / "j.db"),
            "--agent",
            "openai",
        ],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        env={**os.environ, "AGENTJOURNAL_MODEL": "some-model"},
    )
    one_line_refusal(result, "pip install 'agentjournal[openai]'")
    assert list(tmp_path.iterdir()) == []


# -- keys -------------------------------------------------------------------------------------


def test_keys_create_list_revoke_against_a_running_server(
    tmp_path: Path, start_server: Callable[..., Running]
) -> None:
    db_path = tmp_path / "journal.db"
    created = cli("keys", "create", "--tenant", "acme", "--db", str(db_path), "--label", "ci")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("aj_")
    assert len(created.stdout.splitlines()) == 1  # the key alone on stdout, to pipe
    key_id = key.split("_")[1]
    assert key_id in created.stderr
    other = cli("keys", "create", "--tenant", "beta", "--db", str(db_path)).stdout.strip()

    listed = cli("keys", "list", "--db", str(db_path))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [key_id, "acme", "active", "ci"] in rows
    assert len(rows) == 2
    assert key.split("_", 2)[2] not in listed.stdout  # never the secret
    only_beta = cli("keys", "list", "--db", str(db_path), "--tenant", "beta").stdout
    assert [row.split("\t")[1] for row in only_beta.splitlines()] == ["beta"]

    running = start_server(db_path=db_path)
    with httpx.Client(base_url=running.base_url, timeout=10.0) as client:
        headers = {"Authorization": f"Bearer {key}"}
        made = client.post("/v1/sessions", json={"title": "t"}, headers=headers)
        assert made.status_code == 201, made.text
        assert made.json()["tenant"] == "acme"

        revoked = cli("keys", "revoke", key_id, "--db", str(db_path))
        assert revoked.returncode == 0, revoked.stderr
        # The server caches keys briefly (~5 s): the revoked key fails within a bounded wait.
        wait_until(
            lambda: client.get("/v1/sessions", headers=headers).status_code == 401,
            "the revoked key to be refused",
        )
        refused = client.post("/v1/sessions", json={}, headers=headers)
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        # The other key still works.
        beta = client.get("/v1/sessions", headers={"Authorization": f"Bearer {other}"})
        assert beta.status_code == 200

    again = cli("keys", "revoke", key_id, "--db", str(db_path))
    assert again.returncode == 1
    assert key_id in again.stderr
    rows = [
        line.split("\t") for line in cli("keys", "list", "--db", str(db_path)).stdout.splitlines()
    ]
    assert [key_id, "acme", "revoked", "ci"] in rows


def test_keys_create_refuses_a_bad_tenant(tmp_path: Path) -> None:
    result = cli("keys", "create", "--tenant", "bad tenant", "--db", str(tmp_path / "j.db"))
    assert result.returncode != 0
    assert "aj_" not in result.stdout


# -- graceful shutdown ------------------------------------------------------------------------


def test_sigterm_with_a_stream_open_and_appends_in_flight(
    tmp_path: Path, start_server: Callable[..., Running]
) -> None:
    running = start_server(db_path=tmp_path / "journal.db")
    with httpx.Client(base_url=running.base_url, timeout=10.0) as client:
        made = client.post("/v1/sessions", json={"title": "shutdown"})
        assert made.status_code == 201
        sid = made.json()["session_id"]

    acknowledged: list[dict[str, Any]] = []
    lock = threading.Lock()
    stream_ids: list[str] = []
    stream_ended = threading.Event()
    stream_open = threading.Event()
    stream_errors: list[BaseException] = []

    def reader() -> None:
        try:
            with (
                httpx.Client(base_url=running.base_url, timeout=30.0) as client,
                connect_sse(client, "GET", f"/v1/sessions/{sid}/events/stream") as source,
            ):
                stream_open.set()
                for frame in source.iter_sse():
                    if frame.data:
                        stream_ids.append(frame.id)
        except httpx.HTTPError as exc:  # a connection cut is an acceptable end too
            stream_errors.append(exc)
        finally:
            stream_ended.set()

    def writer(index: int) -> None:
        with httpx.Client(base_url=running.base_url, timeout=30.0) as client:
            for n in range(10_000):  # ends when the server goes away
                body = {"type": "user_message", "payload": {"content": f"w{index}-{n}"}}
                try:
                    response = client.post(f"/v1/sessions/{sid}/events", json=body)
                except httpx.HTTPError:
                    return
                if response.status_code != 201:
                    return
                with lock:
                    acknowledged.append(response.json())

    threads = [threading.Thread(target=reader, daemon=True)]
    threads += [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    assert stream_open.wait(timeout=20)
    wait_until(lambda: len(acknowledged) >= 20, "appends in flight")

    running.process.send_signal(signal.SIGTERM)
    try:
        code = running.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve did not exit within 20 s of SIGTERM: {running.log()}")
    assert stream_ended.wait(timeout=20), "the open stream was not closed"
    for thread in threads:
        thread.join(timeout=20)
        assert not thread.is_alive()

    # Every acknowledged append is in the database, exactly as acknowledged.
    with Journal.open(running.db_path) as journal:
        stored: dict[int, dict[str, Any]] = {}
        after = 0
        for _ in range(1000):  # bounded paging
            page = journal.events(sid, after=after, limit=1000)
            if not page:
                break
            stored.update({e.event_id: e.to_dict() for e in page})
            after = page[-1].seq
        assert journal.verify().ok
    assert acknowledged
    for event in acknowledged:
        assert stored.get(event["event_id"]) == event
    assert sorted(e["seq"] for e in stored.values()) == list(range(1, len(stored) + 1))
    # What the stream delivered before it closed is a gap-free prefix of the session.
    assert stream_ids == [str(seq) for seq in range(1, len(stream_ids) + 1)]
    # A graceful stop is a clean exit, not death by the signal (which looks like a kill).
    assert code == 0, f"exit status {code} after SIGTERM (want 0): {running.log()}"

"""Fixtures for tests over a REAL server: `agentjournal serve` in a subprocess (uvicorn) on a free
127.0.0.1 port over a temporary database, waited for through GET /healthz, stopped with SIGTERM.

- `server`: open mode (no API keys; every request is tenant 'default'). Module scope.
- `keyed_server`: API keys created before start for tenants "acme" and "beta"; `.keys` maps
  tenant -> key. Module scope.
- `client`: an `httpx.Client` on `server.base_url`.
- `start_server`: a factory for servers with other flags (limits, rate, agent); each is stopped at
  the end of the module. Example: `start_server("--rate-limit", "5", tenants=("acme",))`,
  `start_server(limits={"heartbeat_seconds": 0.2})` for limits the CLI has no flag for, or
  `start_server("--agent", "demo", env={"AGENTJOURNAL_ORDER_DELAY": "0"})` (`env` is added to
  this process' environment for the child). `db_path` may also be a `postgresql://` URL, and
  `port` a fixed port (to restart a server where its clients expect it).
- `RunningServer.headers(tenant)`: the `Authorization: Bearer` header dict of that tenant's key.

Every server is reachable on loopback only; nothing here sends traffic anywhere else.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal import Journal
from agentjournal.keys import ApiKeys
from postgres_fixtures import fresh_schema, url_for

START_TIMEOUT = 30.0  # seconds to wait for /healthz (a shared, 2-core machine)
STOP_TIMEOUT = 15.0  # seconds for SIGTERM to end the process


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def auth(key: str) -> dict[str, str]:
    """The `Authorization: Bearer <key>` header."""
    return {"Authorization": f"Bearer {key}"}


def create_keys(db_path: Path | str, tenants: Sequence[str]) -> dict[str, str]:
    """One API key per tenant, created with the library before a server starts."""
    if not tenants:
        return {}
    with Journal.open(db_path) as journal:
        keys = ApiKeys(journal.storage)
        return {tenant: keys.create(tenant, "tests")[1] for tenant in tenants}


@dataclass
class RunningServer:
    """A live `agentjournal serve` process. `keys` maps tenant -> API key (empty in open mode).
    `db_path` is the SQLite file, or the `postgresql://` URL the server was given."""

    base_url: str
    db_path: Path | str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    keys: dict[str, str] = field(default_factory=dict)

    def headers(self, tenant: str | None = None) -> dict[str, str]:
        """Authorization for `tenant` (or no header at all when tenant is None)."""
        return auth(self.keys[tenant]) if tenant is not None else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then wait; SIGKILL if it does not end in time. Returns the exit code of the
        SIGTERM (None if it had to be killed)."""
        if self.process.poll() is not None:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)
            return None


def serve_command(db_path: Path | str, port: int, *args: str, host: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentjournal.cli",
        "serve",
        "--db",
        str(db_path),
        "--host",
        host,
        "--port",
        str(port),
        *args,
    ]


# Runs `create_app(journal, limits=Limits(**limits))` under uvicorn, for the limits that
# `agentjournal serve` has no flag for (e.g. heartbeat_seconds). argv: db, port, limits as JSON.
_LIMITS_SCRIPT = """
import json, sys
import uvicorn
from agentjournal.journal import Journal
from agentjournal.server import Limits, create_app
journal = Journal.open(sys.argv[1])
app = create_app(journal, limits=Limits(**json.loads(sys.argv[3])))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def launch(
    db_path: Path | str,
    *args: str,
    keys: dict[str, str] | None = None,
    limits: dict[str, Any] | None = None,
    log_dir: Path | None = None,
    timeout: float = START_TIMEOUT,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> RunningServer:
    """Start `agentjournal serve --db db_path <args>` (or, with `limits`, the app with those
    `Limits` under uvicorn) on a free loopback port and wait until GET /healthz answers 200.
    `env` is added to this process' environment for the child. Retries on another port if the
    process dies at start (port race); with a fixed `port`, retries on that port. A database
    URL (str) needs a `log_dir`."""
    if log_dir is None:
        assert isinstance(db_path, Path), "a database URL needs a log_dir"
        log_dir = db_path.parent
    fixed_port = port
    last_log = ""
    for attempt in range(3):
        port = free_port() if fixed_port is None else fixed_port
        log_path = log_dir / f"server-{port}-{attempt}.log"
        if limits is None:
            argv = serve_command(db_path, port, *args)
        else:
            argv = [sys.executable, "-c", _LIMITS_SCRIPT, str(db_path), str(port)]
            argv.append(json.dumps(limits))
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
            )
        running = RunningServer(
            f"http://127.0.0.1:{port}", db_path, port, process, log_path, dict(keys or {})
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{running.base_url}/healthz", timeout=2.0).status_code == 200:
                    return running
            time.sleep(0.05)
        last_log = running.log()
        running.stop()
    raise RuntimeError(f"server did not start: {last_log}")


StartServer = Callable[..., RunningServer]


@pytest.fixture(scope="module")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """Factory: `start_server(*serve_args, tenants=(), db_path=None, limits=None, env=None,
    port=None)` -> RunningServer. Keys for `tenants` are created before start (then the server
    requires keys). `limits` (a dict of `agentjournal.server.Limits` fields) runs the app with
    those limits instead of the CLI, ignoring `serve_args`. `env` is added to the child's
    environment. `db_path` may be a `postgresql://` URL (logs then go to a temporary directory);
    `port` fixes the port. All are stopped (SIGTERM) when the module ends."""
    started: list[RunningServer] = []

    def start(
        *args: str,
        tenants: Sequence[str] = (),
        db_path: Path | str | None = None,
        limits: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> RunningServer:
        if db_path is None:
            db_path = tmp_path_factory.mktemp("server") / "journal.db"
        log_dir = tmp_path_factory.mktemp("server-log") if isinstance(db_path, str) else None
        keys = create_keys(db_path, tenants)
        running = launch(
            db_path, *args, keys=keys, limits=limits, env=env, log_dir=log_dir, port=port
        )
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path | str]:
    """A database for a module's server, one per backend: a SQLite file, or a fresh PostgreSQL
    schema (dropped after the module; ask for it before `start_server`, so the servers stop
    first)."""
    if request.param == "sqlite":
        yield tmp_path_factory.mktemp("server") / "journal.db"
        return
    with fresh_schema("srv") as schema:
        yield url_for(schema)


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> RunningServer:
    """An open-mode server (no keys): `.base_url`, `.db_path`; every session is tenant 'default'."""
    return start_server()


@pytest.fixture(scope="module")
def keyed_server(start_server: StartServer) -> RunningServer:
    """A server with keys for tenants "acme" and "beta": `.base_url`, `.db_path`, `.keys`
    (tenant -> key). Send `headers=keyed_server.headers("acme")` (Authorization: Bearer)."""
    return start_server(tenants=("acme", "beta"))


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    """`httpx.Client(base_url=server.base_url)` on the open-mode server (10 s timeout)."""
    with httpx.Client(base_url=server.base_url, timeout=10.0) as opened:
        yield opened

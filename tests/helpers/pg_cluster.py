"""A private PostgreSQL cluster for the tests that must stop or restart the server itself (which
the shared server on 127.0.0.1:5432 must never be): initdb'd in a temporary folder with the
machine's PostgreSQL binaries, trust auth, listening on a free port of 127.0.0.1 and on a socket
in that folder. `private_cluster()` starts it and stops it (then removes the folder) however the
block ends.

PostgreSQL refuses to run as root: as root, the folder is given to the `postgres` OS user and
every command runs as that user (`runuser -u postgres --`); as anyone else they run directly.
Without the binaries the test skips, or under CI (`CI=true`) fails, as for the shared server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

BIN = Path(os.environ.get("AGENTJOURNAL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
RUN_AS = "postgres"  # the OS user the server runs as when the tests run as root
SUPERUSER = "postgres"  # the cluster's superuser role, whoever runs it
APP = "agentjournal"  # an ordinary role owning the database `journal`, as a deployment has it


def cluster_problem() -> str | None:
    """Why a private cluster cannot be run here, or None."""
    missing = [name for name in ("initdb", "pg_ctl") if not (BIN / name).is_file()]
    if missing:
        return f"no PostgreSQL binaries {', '.join(missing)} in {BIN} to run a private cluster"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root, and no {RUN_AS!r} OS user to run a private cluster as"
        if shutil.which("runuser") is None:
            return "running as root, and no runuser to run a private cluster as postgres"
    return None


def require_cluster() -> None:
    problem = cluster_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{problem} (CI must run the PostgreSQL tests)")
    pytest.skip(problem)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgCluster:
    """A running private cluster: `url` reaches its `postgres` database as its superuser,
    `app_url` the database `journal` as the ordinary role that owns it (what a journal opens)."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.url = f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"
        self.app_url = f"postgresql://{APP}@127.0.0.1:{port}/journal"
        self.restarts = 0

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(BIN / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stdout}{done.stderr}")
        return done

    def pg_ctl(self, *args: str) -> None:
        self.run("pg_ctl", *args, "-D", str(self.data), "-w", "-t", "60", "-l", str(self.log))

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c max_connections=40 -c shared_buffers=16MB"
        )
        self.pg_ctl("start", "-o", options)

    def restart(self, mode: str) -> None:
        """Restart the server, shut down `fast` (clients' connections ended, a clean shutdown)
        or `immediate` (every process killed at once, as in a crash: recovery from the WAL at
        start). The options it was started with are kept."""
        self.pg_ctl("restart", "-m", mode)
        self.restarts += 1

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.pg_ctl("stop", "-m", "immediate")


@contextmanager
def private_cluster() -> Iterator[PgCluster]:
    """A fresh cluster, started; stopped and removed when the block ends, however it ends."""
    require_cluster()
    root = Path(tempfile.mkdtemp(prefix="aj-pg-"))  # short: a socket path has ~100 characters
    if os.geteuid() == 0:
        account = pwd.getpwnam(RUN_AS)
        os.chown(root, account.pw_uid, account.pw_gid)
    cluster = PgCluster(root, _free_port())
    try:
        cluster.run(
            "initdb", "-D", str(cluster.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        cluster.start()
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(APP)))
            admin.execute(sql.SQL("CREATE DATABASE journal OWNER {}").format(sql.Identifier(APP)))
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)

"""Replication through faults, while the source is written and the replicator follows: the
network path to the central PostgreSQL cut again and again (a TCP proxy that resets every
connection, and refuses new ones for a while), and a target that refuses writes for a while (its
privileges revoked). The replicator backs off, resumes from the target's position, and the
target ends with every source event exactly once; verify is clean on both."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from types import ModuleType

import psycopg
from psycopg import sql

from agentjournal import Journal, replicate
from agentjournal.replication import BatchReport
from bench_runs import bench_module
from helpers.tcp_proxy import TcpProxy
from postgres_fixtures import ADMIN_URL, HOST, ROLE, fresh_schema, url_for


def soak() -> ModuleType:
    return bench_module("replication_soak.py")


def test_a_target_cut_off_again_and_again_ends_with_every_event_once(tmp_path: Path) -> None:
    checks = soak()
    rng = random.Random(36)
    host, port = HOST.split("/")[0].split(":")
    with (
        fresh_schema("cut") as schema,
        TcpProxy((host, int(port))) as proxy,
        Journal.open(tmp_path / "edge.db") as source,
    ):
        through_proxy = url_for(schema).replace(HOST, f"127.0.0.1:{proxy.port}/test")
        assert f"{ROLE}@127.0.0.1:{proxy.port}" in through_proxy
        writer = checks.Writer(source, seed=36)
        writer.start()
        stop = threading.Event()
        failures: list[BaseException] = []
        batches: list[BatchReport] = []

        def follow() -> None:
            with Journal.open(through_proxy) as target:
                replicate(
                    source,
                    target,
                    follow=True,
                    stop=stop,
                    batch_size=5,
                    on_batch=batches.append,
                    on_error=lambda exc, pause: failures.append(exc),
                )

        follower = threading.Thread(target=follow)
        follower.start()
        try:
            for cut in range(12):
                time.sleep(rng.uniform(0.05, 0.3))
                if cut % 4 == 3:  # down for a while: new connections fail too
                    proxy.refuse(True)
                    proxy.cut()
                    time.sleep(1.0)
                    proxy.refuse(False)
                else:
                    proxy.cut()
        finally:
            writer.stop.set()
            writer.join()
            time.sleep(0.5)
            stop.set()
            follower.join(timeout=120)
        assert not follower.is_alive()
        assert writer.failure is None
        assert batches
        assert proxy.cuts == 12  # (the library's own retries may absorb a cut: no failure shown)
        with Journal.open(url_for(schema)) as target:
            replicate(source, target)  # whatever the follower had not reached yet
            assert checks.check(source, target, writer.purged) == []


def test_a_target_refusing_writes_is_retried_with_a_growing_pause(tmp_path: Path) -> None:
    checks = soak()
    with fresh_schema("refuse") as schema, Journal.open(tmp_path / "edge.db") as source:
        sid = source.create_session("before").session_id
        stop = threading.Event()
        pauses: list[float] = []
        messages: list[str] = []

        def on_error(exc: BaseException, pause: float) -> None:
            pauses.append(pause)
            messages.append(str(exc))

        def privileges(verb: str) -> None:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(
                    sql.SQL(verb + " INSERT, UPDATE ON {}.replication_progress {} {}").format(
                        sql.Identifier(schema),
                        sql.SQL("FROM" if verb == "REVOKE" else "TO"),
                        sql.Identifier(ROLE),
                    )
                )

        with Journal.open(url_for(schema)) as target:
            replicate(source, target)
            privileges("REVOKE")
            follower = threading.Thread(
                target=replicate,
                args=(source, target),
                kwargs={"follow": True, "stop": stop, "on_error": on_error},
            )
            follower.start()
            try:
                source.append(sid, "user_message", {"content": "while refused"})
                deadline = time.monotonic() + 60
                while len(pauses) < 3 and time.monotonic() < deadline:
                    time.sleep(0.05)
                privileges("GRANT")
                while target.get_session(sid).last_seq < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                stop.set()
                follower.join(timeout=60)
            assert pauses[:3] == [0.1, 0.2, 0.4]
            assert "permission denied" in messages[0]
            assert checks.check(source, target, set()) == []


def test_target_connections_terminated_mid_batch_as_by_a_restart(tmp_path: Path) -> None:
    """What a PostgreSQL restart does to a client, without restarting the server the other
    tests share: every connection of this replicator terminated by the server (pg_terminate_
    backend, as a shutdown does), mid-batch or idle, ten times."""
    checks = soak()
    rng = random.Random(7)
    name = f"aj_restart_{rng.randrange(10**9)}"
    with fresh_schema("restart") as schema, Journal.open(tmp_path / "edge.db") as source:
        url = url_for(schema, application_name=name)
        writer = checks.Writer(source, seed=7)
        writer.start()
        stop = threading.Event()
        batches: list[BatchReport] = []

        def follow() -> None:
            with Journal.open(url) as target:
                replicate(
                    source, target, follow=True, stop=stop, batch_size=5, on_batch=batches.append
                )

        follower = threading.Thread(target=follow)
        follower.start()
        terminated = 0
        try:
            with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
                for _ in range(10):
                    time.sleep(rng.uniform(0.05, 0.3))
                    rows = admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE application_name = %s",
                        (name,),
                    ).fetchall()
                    terminated += len(rows)
        finally:
            writer.stop.set()
            writer.join()
            stop.set()
            follower.join(timeout=120)
        assert not follower.is_alive()
        assert writer.failure is None
        assert batches
        assert terminated > 0
        with Journal.open(url_for(schema)) as target:
            replicate(source, target)
            assert checks.check(source, target, writer.purged) == []

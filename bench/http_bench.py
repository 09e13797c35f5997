"""agentjournal's HTTP service over a real server: appends, ack → stream delay, SSE fan-out.

    .venv/bin/python bench/http_bench.py            # the full run (about three minutes)
    .venv/bin/python bench/http_bench.py --quick    # a smoke run (seconds; figures are rough)

Each scenario starts its own `agentjournal serve` (a subprocess, the CLI a user runs) on a free
loopback port over a fresh database in a temporary directory, at the default durability (`full`),
with one API key (every request carries `Authorization: Bearer`). The clients are asyncio +
httpx (+ httpx-sse for streams) in this process. Peak RSS is the SERVER process's high-water mark
(`VmHWM` in /proc/<pid>/status), read at the end of its scenario.

- appends: 32 concurrent clients, each appending one `user_message` per request to its own
  session, each with its own `httpx.AsyncClient` (one keep-alive connection). Interleaved block
  by block with the baseline: the same appends in this process through `Journal.append`, 32
  threads each on its own session, same durability, a database in the same directory.
- delay: one SSE subscriber on a session, one client appending to it every few milliseconds;
  delay = the subscriber's arrival time of the event (by `id:` = seq) − the time the append's
  201 reached the appender. Both clocks are this process's `perf_counter`.
- fan-out: N SSE subscribers on one session (the server's --max-streams-per-key and --rate-limit
  raised), then events appended at a modest rate; every subscriber must receive every event,
  in order, once; delay as above, over every (subscriber, event).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import importlib.util
import math
import os
import platform
import random
import resource
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import uvicorn
from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from agentjournal.keys import ApiKeys
from journal_bench import figure, source_fingerprint, user_message

CLIENTS = 32
DELAY_TARGET = 0.020  # s, median ack → stream delay on loopback (the issue)
FANOUT_TARGET = 1_000  # subscribers, each receiving every event (the issue)
FANOUT_P99_TARGET = 0.250  # s, p99 delay at that many subscribers (the issue)
FANOUT_RSS_TARGET = 300.0  # MB, the server's RSS holding 1,000 subscribers (our budget)
START_TIMEOUT = 30.0  # s, for the server's /healthz
TENANT = "bench"


@dataclass(frozen=True)
class Plan:
    """How much work each scenario does."""

    reps: int  # interleaved blocks of appends (HTTP, then in-process; the median is reported)
    client_appends: int  # appends per client per block
    delay_events: int  # appends timed for the ack → stream delay
    delay_warmup: int  # appends before those (not timed)
    delay_interval: float  # s between one ack and the next append
    subscribers: tuple[int, ...]  # fan-out sizes, each on a fresh server
    fanout_events: int  # events appended while the subscribers listen
    fanout_rate: float  # events/s appended during the fan-out
    idle_seconds: float  # s the server's CPU is measured while it only holds the streams


FULL = Plan(
    reps=7,
    client_appends=40,
    delay_events=300,
    delay_warmup=20,
    delay_interval=0.010,
    subscribers=(250, 1_000, 2_000),
    fanout_events=100,
    fanout_rate=10.0,
    idle_seconds=3.0,
)
QUICK = Plan(
    reps=2,
    client_appends=3,
    delay_events=20,
    delay_warmup=3,
    delay_interval=0.005,
    subscribers=(50,),
    fanout_events=10,
    fanout_rate=20.0,
    idle_seconds=0.5,
)


# -- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the server's child process: SIGTERM it if the bench dies (Linux), so no server is left
    behind even when this process is killed outright."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _proc_status(pid: int, field_name: str) -> float | None:
    """A `kB` field of /proc/<pid>/status, in MB (None where there is no /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a process (None where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float | None:
    """CPU seconds all processes of the machine have used since boot (None without /proc)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds of this process and of its finished children (the servers)."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Server:
    """`agentjournal serve` on a free loopback port, with one API key."""

    workdir: Path
    name: str
    args: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    key: str = ""
    log: Path = field(init=False)
    db: Path = field(init=False)

    def __post_init__(self) -> None:
        self.db = self.workdir / f"{self.name}.db"
        self.log = self.workdir / f"{self.name}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def start(self) -> None:
        with Journal.open(self.db) as journal:
            self.key = ApiKeys(journal.storage).create(TENANT, "bench")[1]
        for _ in range(3):  # another process may take the free port before the server binds it
            self.port = free_port()
            command = [
                sys.executable,
                *("-m", "agentjournal.cli", "serve", "--db", str(self.db)),
                *("--host", "127.0.0.1", "--port", str(self.port), *self.args),
            ]
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            if self._wait_healthy():
                return
        raise RuntimeError(f"the server did not start:\n{self.log.read_text()[-3000:]}")

    def _wait_healthy(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=2.0).status_code == 200:
                    return True
            time.sleep(0.05)
        self.stop()
        return False

    def peak_rss_mb(self) -> float | None:
        return None if self.process is None else _proc_status(self.process.pid, "VmHWM")

    def rss_mb(self) -> float | None:
        return None if self.process is None else _proc_status(self.process.pid, "VmRSS")

    def cpu(self) -> float | None:
        return None if self.process is None else _proc_cpu(self.process.pid)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)


@contextlib.contextmanager
def running(workdir: Path, name: str, *args: str) -> Iterator[Server]:
    server = Server(workdir, name, args)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def client(server: Server, connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.base_url,
        headers=server.headers,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(60.0),
    )


async def create_session(http: httpx.AsyncClient, title: str) -> tuple[str, int]:
    """(session id, its last seq) of a new session."""
    response = await http.post("/v1/sessions", json={"title": title})
    response.raise_for_status()
    body = response.json()
    return body["session_id"], body["last_seq"]


async def open_streams(http: httpx.AsyncClient) -> float:
    """The server's open SSE streams, from its Prometheus metrics."""
    text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("agentjournal_open_streams "):
            return float(line.split()[1])
    return float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


# -- appends: 32 clients over HTTP, against Journal.append in 32 threads ---------------------


async def _http_block(
    clients: Sequence[httpx.AsyncClient],
    sessions: Sequence[str],
    work: Sequence[Sequence[dict[str, Any]]],
) -> tuple[float, list[float]]:
    """Each client appends its events, one request each; (wall time, per-request latencies)."""
    go = asyncio.Event()
    latencies: list[float] = []

    async def one(
        http: httpx.AsyncClient, session_id: str, bodies: Sequence[dict[str, Any]]
    ) -> None:
        await go.wait()
        for body in bodies:
            start = time.perf_counter()
            response = await http.post(f"/v1/sessions/{session_id}/events", json=body)
            latencies.append(time.perf_counter() - start)
            if response.status_code != 201:
                raise RuntimeError(f"append answered {response.status_code}: {response.text}")

    tasks = [asyncio.create_task(one(*item)) for item in zip(clients, sessions, work, strict=True)]
    await asyncio.sleep(0)
    start = time.perf_counter()
    go.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
    return time.perf_counter() - start, latencies


def _journal_block(
    journal: Journal, sessions: Sequence[str], work: Sequence[Sequence[dict[str, Any]]]
) -> tuple[float, list[float]]:
    """The same appends through `Journal.append`, one thread per client, released together."""
    barrier = threading.Barrier(len(sessions) + 1)
    latencies: list[float] = []
    errors: list[BaseException] = []

    def one(session_id: str, bodies: Sequence[dict[str, Any]]) -> None:
        barrier.wait()
        try:
            for body in bodies:
                start = time.perf_counter()
                journal.append(session_id, body["type"], body["payload"])
                latencies.append(time.perf_counter() - start)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=item) for item in zip(sessions, work, strict=True)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout=300)
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed, latencies


async def appends(plan: Plan, workdir: Path, rng: random.Random) -> list[dict[str, Any]]:
    def work(count: int) -> list[list[dict[str, Any]]]:
        specs = [[user_message(rng) for _ in range(count)] for _ in range(CLIENTS)]
        return [[{"type": t, "payload": p} for t, p in each] for each in specs]

    blocks = [work(plan.client_appends) for _ in range(plan.reps)]
    http_rates, journal_rates, http_lat, journal_lat = [], [], [], []
    client_cpu = server_cpu = http_wall = 0.0
    with (
        running(workdir, "appends", "--rate-limit", "1000000") as server,
        Journal.open(workdir / "in-process.db") as journal,
    ):
        async with contextlib.AsyncExitStack() as stack:
            # One client (one keep-alive connection) per appender: httpx's shared pool scans
            # every connection on each request, which costs the clients more CPU than the server.
            http = [await stack.enter_async_context(client(server, 1)) for _ in range(CLIENTS)]
            sessions = [(await create_session(h, f"c{i}"))[0] for i, h in enumerate(http)]
            local = [journal.create_session(f"c{i}").session_id for i in range(CLIENTS)]
            warm = work(2)  # connections opened, code paths warm; not timed
            await _http_block(http, sessions, warm)
            _journal_block(journal, local, warm)
            total = CLIENTS * plan.client_appends
            for rep, block in enumerate(blocks):
                # Alternate who goes first, so neither always follows the other's checkpoint.
                order = ("http", "journal") if rep % 2 == 0 else ("journal", "http")
                for side in order:
                    if side == "http":
                        cpu0, scpu0 = self_cpu(), server.cpu() or 0.0
                        elapsed, lat = await _http_block(http, sessions, block)
                        client_cpu += self_cpu() - cpu0
                        server_cpu += (server.cpu() or 0.0) - scpu0
                        http_wall += elapsed
                        http_rates.append(total / elapsed)
                        http_lat += lat
                    else:
                        elapsed, lat = _journal_block(journal, local, block)
                        journal_rates.append(total / elapsed)
                        journal_lat += lat
        rss = server.peak_rss_mb()
    rate, base = statistics.median(http_rates), statistics.median(journal_rates)
    cpu_note = (
        f"appends over HTTP: while the {CLIENTS} clients ran, the server used"
        f" {server_cpu / http_wall:.0%} of a core and the clients (this process, httpx)"
        f" {client_cpu / http_wall:.0%}, on {os.cpu_count()} CPUs; rate = median of"
        f" {plan.reps} blocks of {CLIENTS} × {plan.client_appends} appends, each client on its"
        " own session and its own httpx client; latencies over every request of every block."
    )
    rows = [
        row(
            f"appends/s over HTTP, {CLIENTS} clients",
            "ev/s",
            rate,
            base,
            target="— (reported)",
            rss=rss,
            note=cpu_note,
        )
    ]
    for q in (50, 99):
        rows.append(
            row(
                f"append latency p{q}, {CLIENTS} clients",
                "s",
                percentile(http_lat, q),
                percentile(journal_lat, q),
                target="— (reported)",
                rss=rss,
            )
        )
    return rows


# -- streams ---------------------------------------------------------------------------------


@dataclass
class Subscriber:
    """One SSE stream on a session: the arrival time of each event, by seq."""

    seqs: list[int] = field(default_factory=list)
    arrivals: dict[int, float] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None


async def subscribe(
    http: httpx.AsyncClient, session_id: str, ready_seq: int, last_seq: int, sub: Subscriber
) -> None:
    """Read the session's stream from the start until `last_seq` arrived; `sub.ready` is set
    once the backlog up to `ready_seq` arrived, i.e. the server is past the backlog."""
    try:
        url = f"/v1/sessions/{session_id}/events/stream"
        async with httpx_sse.aconnect_sse(http, "GET", url, params={"after": 0}) as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                now = time.perf_counter()
                # httpx-sse also yields a data-less "event" for the `retry:` hint and for every
                # heartbeat comment (the latter carrying the last id again); the SSE spec
                # dispatches nothing when there is no data, so neither is an event.
                if not sse.data:
                    continue
                seq = int(sse.id)
                sub.seqs.append(seq)
                sub.arrivals[seq] = now
                if seq >= ready_seq:
                    sub.ready.set()
                if seq >= last_seq:
                    return
    except BaseException as exc:
        sub.error = exc
        sub.ready.set()
        if not isinstance(exc, Exception):
            raise


async def append_paced(
    http: httpx.AsyncClient, session_id: str, count: int, *, interval: float = 0.0, rate: float = 0
) -> dict[int, tuple[float, float]]:
    """`count` appends one after another; {seq: (sent, acknowledged)}. With `rate`, the n-th
    append is sent at n / rate s (or at once when behind); with `interval`, that long after the
    previous acknowledgement."""
    acks: dict[int, tuple[float, float]] = {}
    start = time.perf_counter()
    for n in range(count):
        if rate:
            await asyncio.sleep(max(0.0, start + n / rate - time.perf_counter()))
        body = {"type": "bench.ping", "payload": {"n": n}}
        sent = time.perf_counter()
        response = await http.post(f"/v1/sessions/{session_id}/events", json=body)
        acked = time.perf_counter()
        if response.status_code != 201:
            raise RuntimeError(f"append answered {response.status_code}: {response.text}")
        acks[response.json()["seq"]] = (sent, acked)
        if interval:
            await asyncio.sleep(interval)
    return acks


async def _all_ready(subs: Sequence[Subscriber], timeout: float) -> None:
    await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in subs)), timeout)
    failed = [s.error for s in subs if s.error is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} subscribers failed; first: {failed[0]!r}")


async def delay(plan: Plan, workdir: Path) -> list[dict[str, Any]]:
    with running(workdir, "delay", "--rate-limit", "1000000") as server:
        async with client(server, 1) as http, client(server, 1) as listener:
            session_id, base = await create_session(http, "delay")
            total = plan.delay_warmup + plan.delay_events
            sub = Subscriber()
            task = asyncio.create_task(subscribe(listener, session_id, base, base + total, sub))
            try:
                await _all_ready([sub], 30)
                with client_gc_paused():
                    acks = await append_paced(http, session_id, total, interval=plan.delay_interval)
                    await asyncio.wait_for(task, 30)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        rss = server.peak_rss_mb()
    if sub.error is not None:
        raise RuntimeError(f"the subscriber failed: {sub.error!r}")
    timed = sorted(acks)[plan.delay_warmup :]
    if sub.seqs != list(range(1, base + total + 1)):
        raise RuntimeError("the stream skipped, repeated or reordered events")
    delays = [sub.arrivals[s] - acks[s][1] for s in timed]
    end_to_end = [sub.arrivals[s] - acks[s][0] for s in timed]
    early = sum(d < 0 for d in delays)
    median = statistics.median(delays)
    note = (
        f"ack → stream delay: {len(timed)} appends to one session, one every"
        f" {plan.delay_interval * 1e3:.0f} ms after the previous acknowledgement, one subscriber;"
        f" delay = arrival on the stream − arrival of the 201 (negative: the stream was first,"
        f" {early} of {len(timed)}); the 201 leaves after the commit wakes the stream, so the"
        f" two race. From sending the append to arrival on the stream (commit included): p99"
        f" {figure(percentile(end_to_end, 99), 's')}."
    )
    return [
        row(
            "ack → stream delay, median",
            "s",
            median,
            None,
            target=f"< {DELAY_TARGET * 1e3:.0f} ms",
            met=median < DELAY_TARGET,
            rss=rss,
            note=note,
        ),
        row("ack → stream delay, p99", "s", percentile(delays, 99), None, rss=rss),
        row(
            "append sent → on the stream, median",
            "s",
            statistics.median(end_to_end),
            None,
            rss=rss,
        ),
    ]


@contextlib.contextmanager
def client_gc_paused() -> Iterator[None]:
    """No cyclic GC in this (the clients') process while arrival times are taken: its pauses
    (tens of ms with 100,000 arrival times held) would be charged to the server."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late a 5 ms sleep wakes in this (the clients') event loop: when it is late, the
    clients, not the server, are behind."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        samples.append(time.perf_counter() - start - 0.005)


async def fanout(plan: Plan, workdir: Path, count: int) -> tuple[list[dict[str, Any]], bool]:
    """N subscribers on one session; (rows, whether every event reached each within the p99
    target)."""
    limits = ("--max-streams-per-key", str(count + 10), "--rate-limit", "1000000")
    with running(workdir, f"fanout-{count}", *limits) as server:
        idle_rss = server.rss_mb()
        # The subscribers share one client (its pool is touched only when a stream opens or
        # closes); the appender has its own, so its requests never scan the streams' pool.
        async with client(server, 1) as http, client(server, count) as listeners:
            session_id, base = await create_session(http, "fan-out")
            last = base + plan.fanout_events
            subs = [Subscriber() for _ in range(count)]
            tasks: list[asyncio.Task[None]] = []
            connect_start = time.perf_counter()
            try:
                for sub in subs:  # connected a few at a time, as clients arrive
                    tasks.append(
                        asyncio.create_task(subscribe(listeners, session_id, base, last, sub))
                    )
                    if len(tasks) % 50 == 0:
                        await asyncio.sleep(0)
                await _all_ready(subs, 120 + count / 10)
                connect = time.perf_counter() - connect_start
                streams = await open_streams(http)
                holding_rss = server.rss_mb()
                scpu0, idle0 = server.cpu() or 0.0, time.perf_counter()
                await asyncio.sleep(plan.idle_seconds)  # what holding them costs, no events
                idle_cpu = ((server.cpu() or 0.0) - scpu0) / (time.perf_counter() - idle0)
                lag: list[float] = []
                stop = asyncio.Event()
                probe = asyncio.create_task(_loop_lag(lag, stop))
                cpu0, scpu0, wall0 = self_cpu(), server.cpu() or 0.0, time.perf_counter()
                with client_gc_paused():
                    acks = await append_paced(
                        http, session_id, plan.fanout_events, rate=plan.fanout_rate
                    )
                    await asyncio.wait(tasks, timeout=60)
                wall = time.perf_counter() - wall0
                client_cpu, server_cpu = self_cpu() - cpu0, (server.cpu() or 0.0) - scpu0
                stop.set()
                await probe
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            released = await _released(http)
        rss = server.peak_rss_mb()
    expected = list(range(1, last + 1))
    complete = sum(sub.seqs == expected for sub in subs)
    failed = [sub.error for sub in subs if sub.error is not None]
    delays = [
        sub.arrivals[seq] - acks[seq][1] for sub in subs for seq in acks if seq in sub.arrivals
    ]
    from_send = [
        sub.arrivals[seq] - acks[seq][0] for sub in subs for seq in acks if seq in sub.arrivals
    ]
    p50, p99 = percentile(delays, 50), percentile(delays, 99)
    early = sum(d < 0 for d in delays) / len(delays)
    every = complete == count and not failed
    per_stream = (
        f" ~{(holding_rss - idle_rss) * 1024 / count:.0f} KB per stream;"
        if holding_rss and idle_rss
        else ""
    )
    note = (
        f"SSE fan-out @{count:,}: {count:,} streams connected in {connect:.1f} s (server metrics:"
        f" {streams:.0f} open); {plan.fanout_events} events appended at {plan.fanout_rate:g}/s to"
        f" the one session; {complete:,} of {count:,} subscribers received exactly seq"
        f" 1..{last}, in order ({len(failed)} errors); after they left, the server's open streams"
        f" fell to 0 in {released}. Server RSS idle {_mb(idle_rss)}, holding the streams"
        f" {_mb(holding_rss)},{per_stream} peak {_mb(rss)}. Holding them with no events, the"
        f" server used {idle_cpu:.0%} of a core. During the appends: server"
        f" {server_cpu / wall:.0%} of a core, clients (this process) {client_cpu / wall:.0%};"
        f" the clients' event loop woke late by {figure(percentile(lag, 50), 's')} (p50) /"
        f" {figure(percentile(lag, 99), 's')} (p99) — arrival times include that lateness."
        f" {early:.0%} of the deliveries arrived before the appender had its 201: the response"
        " waits behind the frames in the server's one event loop, which is why the delay from"
        " sending the append is shown too."
    )
    meets = count == FANOUT_TARGET
    rows = [
        row(
            f"SSE fan-out @{count:,}: every event to each",
            "text",
            f"{complete:,}/{count:,} complete" if not failed else f"{len(failed)} failed",
            None,
            target="each receives every event" if meets else "—",
            met=every if meets else None,
            rss=rss,
            note=note,
        ),
        row(f"SSE fan-out @{count:,}: delay p50 (from ack)", "s", p50, None, rss=rss),
        row(
            f"SSE fan-out @{count:,}: delay p99 (from ack)",
            "s",
            p99,
            None,
            target=f"< {FANOUT_P99_TARGET * 1e3:.0f} ms" if meets else "—",
            met=(p99 < FANOUT_P99_TARGET) if meets else None,
            rss=rss,
        ),
        row(
            f"SSE fan-out @{count:,}: delay p99 (from send)",
            "s",
            percentile(from_send, 99),
            None,
            rss=rss,
        ),
        row(
            f"SSE fan-out @{count:,}: server RSS holding them",
            "MB",
            holding_rss,
            None,
            target=f"peak < {FANOUT_RSS_TARGET:.0f} MB [aim]" if meets else "—",
            met=(rss is not None and rss < FANOUT_RSS_TARGET) if meets else None,
            rss=rss,
        ),
    ]
    return rows, every and p99 < FANOUT_P99_TARGET


async def _released(http: httpx.AsyncClient, timeout: float = 30.0) -> str:
    """How long the server takes to count every stream closed after the clients left."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if await open_streams(http) == 0:
            return figure(time.perf_counter() - start, "s")
        await asyncio.sleep(0.05)
    return f"NOT within {timeout:.0f} s ({await open_streams(http):.0f} still open)"


# -- the table -------------------------------------------------------------------------------


def row(
    bench: str,
    unit: str,
    ours: Any,
    base: float | None,
    *,
    target: str = "—",
    met: bool | None = None,
    rss: float | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    return {
        "bench": bench,
        "unit": unit,
        "ours": ours,
        "base": base,
        "target": target,
        "met": met,
        "rss_mb": rss,
        "note": note,
    }


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} MB"


def _versus(one: dict[str, Any]) -> str:
    if one["base"] is None:
        return "—"
    kind = {"ev/s": "rate", "s": "time"}[one["unit"]]
    return f"{kind} {one['ours'] / one['base']:.2f}×"


COLUMNS = ("benchmark", "over HTTP", "in-process", "vs in-process", "target", "met?", "peak RSS")


def render(rows: Sequence[dict[str, Any]], console: Console) -> None:
    table = Table(
        title="agentjournal serve vs in-process Journal (medians unless named)",
        title_justify="left",
    )
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("benchmark", "target") else "right")
    for one in rows:
        table.add_row(
            one["bench"],
            figure(one["ours"], one["unit"]),
            figure(one["base"], one["unit"]),
            _versus(one),
            one["target"],
            {True: "yes", False: "NO", None: "—"}[one["met"]],
            _mb(one["rss_mb"]),
        )
    console.print(table)


def lighten_httpcore() -> None:
    """httpcore runs `import sniffio` on every request; when sniffio is not installed (httpx no
    longer needs it) each attempt scans sys.path again: about a third of the clients' CPU, taken
    from the 2 cores the server needs too. Marked absent, the import fails at once, and httpcore
    takes the same fallback (asyncio)."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def raise_fd_limit(needed: int) -> None:
    """Room for every client socket here and every server socket in the child (it inherits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        limit = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


SCENARIOS = ("appends", "delay", "fanout")


async def run(plan: Plan, scenarios: Sequence[str], seed: int, workdir: Path) -> list[Any]:
    rows: list[dict[str, Any]] = []
    for name in scenarios:
        print(f"… {name}", file=sys.stderr, flush=True)
        if name == "appends":
            rows += await appends(plan, workdir, random.Random(seed))
        elif name == "delay":
            rows += await delay(plan, workdir)
        else:
            served = []
            for count in plan.subscribers:
                print(f"… fanout @{count}", file=sys.stderr, flush=True)
                found, ok = await fanout(plan, workdir, count)
                rows += found
                served += [count] if ok else []
            rows[-1]["note"] = (rows[-1]["note"] or "") + (
                f"SSE fan-out, how many: of {', '.join(f'{n:,}' for n in plan.subscribers)}"
                " subscribers, every event reached each subscriber with p99 (from ack) under"
                f" {FANOUT_P99_TARGET * 1e3:.0f} ms at: "
                + (", ".join(f"{n:,}" for n in served) or "none")
                + "."
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, seconds")
    parser.add_argument("--seed", type=int, default=20240601, help="content seed (default fixed)")
    parser.add_argument("--only", choices=SCENARIOS, action="append", help="run only these")
    parser.add_argument(
        "--subscribers", type=int, action="append", help="fan-out sizes (default 1000; quick 50)"
    )
    parser.add_argument("--dir", help="where the temporary databases go (default: the temp dir)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.subscribers:
        plan = Plan(**{**plan.__dict__, "subscribers": tuple(args.subscribers)})
    raise_fd_limit(2 * max(plan.subscribers) + 1024)
    lighten_httpcore()
    # A SIGTERM unwinds like Ctrl-C: servers stopped, temporary files removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    console = Console(width=None if sys.stdout.isatty() else 160)
    started, busy0, own0 = time.perf_counter(), machine_busy(), own_cpu()
    with tempfile.TemporaryDirectory(prefix="agentjournal-http-bench-", dir=args.dir) as workdir:
        rows = asyncio.run(run(plan, args.only or SCENARIOS, args.seed, Path(workdir)))
    console.print(
        f"{datetime.date.today()} · {'QUICK (smoke) run' if args.quick else 'full run'} · "
        f"Python {platform.python_version()} · SQLite {sqlite3.sqlite_version} · "
        f"uvicorn {uvicorn.__version__} · httpx {httpx.__version__} · "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs · durability full · "
        f"src {source_fingerprint()} · {time.perf_counter() - started:.0f} s",
        highlight=False,
    )
    render(rows, console)
    elapsed, busy1 = time.perf_counter() - started, machine_busy()
    others = ""
    if busy0 is not None and busy1 is not None:
        share = (busy1 - busy0 - (own_cpu() - own0)) / elapsed
        others = (
            f" Other processes on the machine used {max(0.0, share):.0%} of a core on average"
            " during the run (the machine is shared; figures move with it)."
        )
    notes = [
        "peak RSS: VmHWM of the `agentjournal serve` process of the row's scenario (a fresh"
        " server per scenario), read at its end; the in-process baseline's memory is not in"
        f" it.{others}",
        *dict.fromkeys(one["note"] for one in rows if one["note"]),
    ]
    for note in notes:
        console.print(f"- {note}", highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

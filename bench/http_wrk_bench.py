"""HTTP appends under `wrk`: the service beside a bare-ASGI floor and beside the 0.1.0 service.

    .venv/bin/python bench/http_wrk_bench.py            # 3 rounds of 10 s each (about 2 minutes)
    .venv/bin/python bench/http_wrk_bench.py --quick    # a smoke run (seconds; figures are rough)

The load generator is `wrk` (a C program; never a Python client on the server's cores). When it
is missing the bench says how to install it (`apt-get install wrk`) and skips the measurement.

Four servers, each its own uvicorn subprocess over a fresh SQLite database (default durability,
`full`) with one API key and 8 sessions, each driven by the same wrk Lua script: 32 connections
POSTing one `user_message` per request to /v1/sessions/{id}/events, round-robin over the 8
sessions, with `Authorization: Bearer <key>` and a JSON body.

- floor: a plain ASGI callable on the same uvicorn (`uvicorn.run`, as `agentjournal serve`), no
  framework: the body read, `json.loads`, `Journal.append` on a worker thread, the event back as
  JSON. No routing, auth, limits, validation or metrics: what the service's features and its
  framework cost is above it. "vs floor" is against this one.
- floor (Starlette route): the floor of earlier runs, kept for continuity: the same steps in a
  bare Starlette route, `Journal.append` in Starlette's threadpool.
- service: `agentjournal serve --rate-limit 1000000` from this checkout (every feature on: auth,
  the rate limiter, problem+json, metrics, the body guard).
- 0.1.0: the same command from the code as of commit 5711f93 (`git archive` into a temporary
  directory, PYTHONPATH pointing there), with uvloop and httptools hidden from it as its
  dependencies never installed them: the service as it shipped.
- with `--plain`, also this checkout's service with uvloop and httptools hidden the same way
  (h11 + asyncio): what those two buy, apart from the code's changes.

Rounds are interleaved (each round starts each server afresh, in a rotated order) and every
round is reported: appends/s (wrk's requests/s; any non-2xx response is counted and shown), and
p50/p99 latency from wrk's own histogram.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SRC = REPO / "src"
OLD_COMMIT = "5711f93"  # the 0.1.0-era service the issue measured (1,170-1,516 appends/s)
TENANT = "bench"
SESSIONS = 8
CONNECTIONS = 32
BODIES = 256  # distinct request bodies the Lua script cycles through
START_TIMEOUT = 30.0
SERVICE = "agentjournal serve (this checkout)"


@dataclass(frozen=True)
class Plan:
    rounds: int
    seconds: int  # wrk -d per measured run
    warmup: int  # wrk -d before it, on the same server (not reported)
    threads: int  # wrk -t


FULL = Plan(rounds=3, seconds=10, warmup=2, threads=2)
QUICK = Plan(rounds=1, seconds=1, warmup=1, threads=1)

INSTALL_HINT = (
    "wrk is not installed: the HTTP load benchmark needs it (Debian/Ubuntu: apt-get install wrk;"
    " macOS: brew install wrk). Skipped."
)

# -- the floors: the journal's part of an append with as little around it as can serve it -------


def asgi_floor_app(db: str) -> Any:
    """A plain ASGI callable, no framework: the body read, `json.loads`, `Journal.append` on a
    worker thread (one dedicated pool, `asyncio.wrap_future` of its future), the event back as
    JSON. No routing table, auth, rate limit, validation, problem+json or metrics."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from agentjournal import Journal

    journal = Journal.open(db, tenant=TENANT)
    pool = ThreadPoolExecutor(32, thread_name_prefix="floor")  # as AsyncJournal's default
    json_headers = [(b"content-type", b"application/json")]

    async def respond(send: Any, status: int, body: bytes) -> None:
        headers = [*json_headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    pool.shutdown(wait=True)
                    journal.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = scope["path"]
        if scope["method"] != "POST":
            await respond(send, 200, b'{"status":"ok"}')  # /healthz, and anything else
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = json.loads(b"".join(chunks))
        session_id = path.split("/")[3]  # /v1/sessions/{id}/events
        future = pool.submit(journal.append, session_id, body["type"], body["payload"])
        event = await asyncio.wrap_future(future)
        await respond(send, 201, json.dumps(event.to_dict()).encode())

    return app


def starlette_floor_app(db: str) -> Any:
    """The floor of earlier runs, kept for continuity: a bare Starlette route, `json.loads` +
    `Journal.append` in Starlette's threadpool + the event as JSON; nothing else."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from agentjournal import Journal

    journal = Journal.open(db, tenant=TENANT)

    async def append(request: Request) -> Response:
        body = json.loads(await request.body())
        event = await run_in_threadpool(
            journal.append, request.path_params["session_id"], body["type"], body["payload"]
        )
        return Response(json.dumps(event.to_dict()), 201, media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(
        routes=[
            Route("/v1/sessions/{session_id}/events", append, methods=["POST"]),
            Route("/healthz", healthz),
        ]
    )


FLOORS = {"floor": asgi_floor_app, "starlette": starlette_floor_app}


def serve_floor(kind: str, db: str, port: int) -> None:
    import uvicorn

    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as `agentjournal serve`
    uvicorn.run(FLOORS[kind](db), host="127.0.0.1", port=port, log_level="warning")


# The database's key and sessions, made by the contestant's own code (its own schema version).
PREPARE = """
import json, sys
from agentjournal import Journal
from agentjournal.keys import ApiKeys
with Journal.open(sys.argv[1]) as journal:
    key = ApiKeys(journal.storage).create(sys.argv[2], "bench")[1]
    tenant = journal.for_tenant(sys.argv[2])
    ids = [tenant.create_session(f"s{i}").session_id for i in range(int(sys.argv[3]))]
print(json.dumps({"key": key, "sessions": ids}))
"""

# 0.1.0 as it shipped: `uvicorn>=0.30` without extras, so neither uvloop nor httptools.
AS_SHIPPED = """
import sys
sys.modules["uvloop"] = None
sys.modules["httptools"] = None
from agentjournal.cli import main
sys.argv[0] = "agentjournal"
main()
"""


@dataclass
class Contestant:
    name: str
    src: Path  # PYTHONPATH of its code
    # "floor" (bare ASGI), "starlette" (the Starlette-route floor), "service", "plain" (the
    # service on h11 + asyncio), "shipped" (0.1.0)
    kind: str


@dataclass
class Server:
    contestant: Contestant
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    key: str = ""
    sessions: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.contestant.src)}

    def start(self, tag: str) -> None:
        db = self.workdir / f"{self.contestant.kind}-{tag}.db"
        prepared = subprocess.run(
            [sys.executable, "-c", PREPARE, str(db), TENANT, str(SESSIONS)],
            capture_output=True,
            text=True,
            env=self.env,
            check=True,
        )
        found = json.loads(prepared.stdout)
        self.key, self.sessions = found["key"], found["sessions"]
        log = self.workdir / f"{self.contestant.kind}-{tag}.log"
        for _ in range(3):  # another process may take the free port before the server binds it
            self.port = free_port()
            if self.contestant.kind in FLOORS:
                command = [sys.executable, __file__, "--serve-floor", self.contestant.kind]
                command += [str(db), str(self.port)]
            else:
                launcher = (
                    ["-c", AS_SHIPPED]
                    if self.contestant.kind in ("shipped", "plain")
                    else ["-m", "agentjournal.cli"]
                )
                command = [
                    sys.executable,
                    *launcher,
                    *("serve", "--db", str(db), "--host", "127.0.0.1", "--port", str(self.port)),
                    *("--rate-limit", "1000000"),
                ]
            with log.open("ab") as out:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            if self._wait_healthy():
                return
        raise RuntimeError(f"{self.contestant.name} did not start:\n{log.read_text()[-3000:]}")

    def _wait_healthy(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{self.port}/healthz"
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return True
            time.sleep(0.05)
        self.stop()
        return False

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
def running(contestant: Contestant, workdir: Path, tag: str) -> Iterator[Server]:
    server = Server(contestant, workdir)
    try:
        server.start(tag)
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In a server's child process: SIGTERM it if the bench dies (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def machine_busy() -> float | None:
    """CPU seconds all processes of the machine have used since boot (None without /proc)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# -- the old code ------------------------------------------------------------------------------


def old_source(workdir: Path, commit: str) -> Path | None:
    """`src/` of `commit`, extracted by `git archive` (the checkout is not touched); None when
    the commit is not in this clone."""
    target = workdir / f"src-{commit}"
    done = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    archive = done.stdout
    target.mkdir()
    tar_path = workdir / f"src-{commit}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(target, filter="data")
    tar_path.unlink()
    return target / "src"


# -- wrk ---------------------------------------------------------------------------------------

LUA = r"""
-- POST one user_message per request, round-robin over the sessions; bodies read from a file.
local sessions = { %(sessions)s }
local bodies = {}
for line in io.lines("%(bodies)s") do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"

function setup(thread)
  thread:set("offset", math.random(0, 1000))
end

function request()
  i = i + 1
  local n = i + (offset or 0)
  local path = "/v1/sessions/" .. sessions[(n %% #sessions) + 1] .. "/events"
  return wrk.format(nil, path, nil, bodies[(n %% #bodies) + 1])
end

function done(summary, latency, requests)
  io.write(string.format(
    'RESULT {"requests": %%d, "duration_us": %%d, "connect": %%d, "read": %%d, "write": %%d,'
    .. ' "status": %%d, "timeout": %%d, "p50_us": %%d, "p90_us": %%d, "p99_us": %%d,'
    .. ' "max_us": %%d}\n',
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def write_bodies(path: Path, seed: int) -> None:
    from journal_bench import user_message

    rng = random.Random(seed)
    lines = []
    for _ in range(BODIES):
        kind, payload = user_message(rng)
        lines.append(json.dumps({"type": kind, "payload": payload}))
    path.write_text("\n".join(lines) + "\n")


def lua_script(server: Server, bodies: Path, path: Path) -> Path:
    sessions = ", ".join(f'"{s}"' for s in server.sessions)
    path.write_text(LUA % {"sessions": sessions, "bodies": bodies, "key": server.key})
    return path


def run_wrk(wrk: str, server: Server, script: Path, seconds: int, threads: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            wrk,
            *("-t", str(threads), "-c", str(CONNECTIONS), "-d", f"{seconds}s"),
            *("--timeout", "10s", "-s", str(script)),
            f"http://127.0.0.1:{server.port}",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            result["rate"] = result["requests"] / (result["duration_us"] / 1e6)
            result["errors"] = sum(
                result[k] for k in ("connect", "read", "write", "status", "timeout")
            )
            return result
    raise RuntimeError(f"wrk printed no result:\n{done.stdout}\n{done.stderr}")


# -- the run -----------------------------------------------------------------------------------


def measure(
    plan: Plan, contestants: Sequence[Contestant], wrk: str, workdir: Path, seed: int
) -> dict[str, list[dict[str, Any]]]:
    bodies = workdir / "bodies.jsonl"
    write_bodies(bodies, seed)
    results: dict[str, list[dict[str, Any]]] = {c.name: [] for c in contestants}
    for number in range(plan.rounds):
        shift = number % len(contestants)
        order = [*contestants[shift:], *contestants[:shift]]
        for contestant in order:
            print(f"… round {number + 1}: {contestant.name}", file=sys.stderr, flush=True)
            with running(contestant, workdir, f"r{number}") as server:
                script = lua_script(server, bodies, workdir / f"{contestant.kind}.lua")
                if plan.warmup:
                    run_wrk(wrk, server, script, plan.warmup, plan.threads)
                results[contestant.name].append(
                    run_wrk(wrk, server, script, plan.seconds, plan.threads)
                )
    return results


def _span(values: Sequence[float], fmt: str) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{format(mid, fmt)} ({format(low, fmt)}-{format(high, fmt)})"


def _median_rate(runs: Sequence[dict[str, Any]]) -> float:
    return float(statistics.median(r["rate"] for r in runs))


def render(results: dict[str, list[dict[str, Any]]], floor: str, console: Any, plan: Plan) -> None:
    from rich.table import Table

    table = Table(
        title=f"appends over HTTP, wrk {CONNECTIONS} connections, {SESSIONS} sessions:"
        f" median (range) of {plan.rounds} round(s) × {plan.seconds} s",
        title_justify="left",
    )
    for column in ("server", "appends/s", "p50 ms", "p99 ms", "vs floor", "errors"):
        table.add_column(column, justify="left" if column == "server" else "right")
    base = results[floor]
    for name, runs in results.items():
        ratios = [run["rate"] / ref["rate"] for run, ref in zip(runs, base, strict=True)]
        table.add_row(
            name,
            _span([r["rate"] for r in runs], ",.0f"),
            _span([r["p50_us"] / 1e3 for r in runs], ".1f"),
            _span([r["p99_us"] / 1e3 for r in runs], ".1f"),
            _span(ratios, ".2f") + "×",
            str(sum(r["errors"] for r in runs)),
        )
    console.print(table)
    service, shipped = (
        results.get(SERVICE),
        next((runs for name, runs in results.items() if name.endswith("(0.1.0)")), None),
    )
    if service and shipped:
        ratios = [new["rate"] / old["rate"] for new, old in zip(service, shipped, strict=True)]
        console.print(
            f"- the service ÷ 0.1.0, each round: {', '.join(f'{r:.2f}×' for r in ratios)}"
            f" (of the medians: {_median_rate(service) / _median_rate(shipped):.2f}×)",
            highlight=False,
        )
    for name, runs in results.items():
        rounds = ", ".join(f"{r['rate']:,.0f}/s p99 {r['p99_us'] / 1e3:.1f} ms" for r in runs)
        console.print(f"- {name}, each round: {rounds}", highlight=False, soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 s")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    parser.add_argument("--seconds", type=int, help="wrk -d per round (default 10)")
    parser.add_argument("--seed", type=int, default=20240601, help="content seed (default fixed)")
    parser.add_argument("--old", default=OLD_COMMIT, help=f"the old commit (default {OLD_COMMIT})")
    parser.add_argument("--no-old", action="store_true", help="skip the old service")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also this checkout's service with uvloop and httptools hidden (h11 + asyncio)",
    )
    parser.add_argument("--dir", help="where the temporary databases go (default: the temp dir)")
    parser.add_argument(
        "--serve-floor", nargs=3, metavar=("KIND", "DB", "PORT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_floor:
        serve_floor(args.serve_floor[0], args.serve_floor[1], int(args.serve_floor[2]))
        return 0
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    wrk = shutil.which("wrk")
    if wrk is None:
        console.print(INSTALL_HINT, highlight=False)
        return 0
    plan = QUICK if args.quick else FULL
    plan = Plan(
        rounds=args.rounds or plan.rounds,
        seconds=args.seconds or plan.seconds,
        warmup=plan.warmup,
        threads=plan.threads,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started, busy0 = time.perf_counter(), machine_busy()
    with tempfile.TemporaryDirectory(prefix="agentjournal-wrk-bench-", dir=args.dir) as workdir:
        work = Path(workdir)
        contestants = [
            Contestant("floor: bare ASGI", SRC, "floor"),
            Contestant("floor (Starlette route)", SRC, "starlette"),
            Contestant(SERVICE, SRC, "service"),
        ]
        if args.plain:
            contestants.append(Contestant("agentjournal serve (this checkout, h11)", SRC, "plain"))
        old = None if args.no_old else old_source(work, args.old)
        if old is None and not args.no_old:
            console.print(
                f"- commit {args.old} is not in this clone (a shallow one?): the 0.1.0 service is"
                " not measured.",
                highlight=False,
            )
        if old is not None:
            contestants.append(
                Contestant(
                    f"agentjournal serve @ {args.old} (0.1.0)",
                    old,
                    "shipped",
                )
            )
        results = measure(plan, contestants, wrk, work, args.seed)
    elapsed, busy1 = time.perf_counter() - started, machine_busy()
    version = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    import uvicorn

    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    console.print(
        f"{datetime.date.today()} · {'QUICK (smoke) run' if args.quick else 'full run'} · "
        f"Python {platform.python_version()} · SQLite {sqlite3.sqlite_version} · "
        f"uvicorn {uvicorn.__version__} ({loop}, {http}) · "
        f"{(version.stdout + version.stderr).split(' [')[0].strip()} -t{plan.threads} · "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs · durability full · "
        f"{elapsed:.0f} s",
        highlight=False,
    )
    render(results, contestants[0].name, console, plan)
    if busy0 is not None and busy1 is not None:
        console.print(
            f"- the machine was busy {(busy1 - busy0) / elapsed:.0%} of a core on average"
            " (wrk and the servers included; it is shared, figures move with it).",
            highlight=False,
        )
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())

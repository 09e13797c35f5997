"""The MCP server's recall tools: how long `search` and `read_session` take through MCP, beside the
same reads over the HTTP API, on one journal.

    .venv/bin/python bench/mcp_bench.py                      # 1,000,000 events (SQLite)
    .venv/bin/python bench/mcp_bench.py --events 200000
    .venv/bin/python bench/mcp_bench.py --db big.db          # reuse a journal a run kept
    .venv/bin/python bench/mcp_bench.py --quick              # a smoke run (rough figures)

The journal is search_bench.py's (sessions of 1,000 ~150-character messages, a fixed seed). One
`agentjournal serve` on it (open mode, loopback) answers both the HTTP API and `/mcp`; a second
process is `agentjournal mcp` over stdio. One client at a time asks, one call after another, from
the official MCP Python SDK's `Client` (stdio, and streamable HTTP) and from httpx (the API):

- search: search_bench.py's queries (a word in half the events, one in 3 %, one in one event, two
  words, Chinese, a prefix), 20 hits: the `search` tool, `GET /v1/search?q=&limit=20`;
- read: the newest 20 events of a session picked at random: the `read_session` tool
  (`last: 20`), `GET /v1/sessions/{id}/events?last=20`.

Latency is the client's: from the call to its parsed answer. p50 and p99 of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from agentjournal import Journal
from agentjournal.backends.sqlite import SQLiteStorage
from mcp import Client, StdioServerParameters
from search_bench import SESSION_LENGTH, build, queries

START_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(db: Path) -> Iterator[str]:
    """`agentjournal serve` on `db`; its base URL while the block runs."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(db), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("agentjournal serve did not start")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Call = Callable[[str, Any], Awaitable[None]]


async def measure(call: Call, asks: list[tuple[str, Any]]) -> list[float]:
    """Milliseconds of each ask, in order (after one unmeasured round of warm-up)."""
    for kind, argument in asks[: len(asks) // 10 + 1]:
        await call(kind, argument)
    found = []
    for kind, argument in asks:
        started = time.perf_counter()
        await call(kind, argument)
        found.append((time.perf_counter() - started) * 1000)
    return found


def mcp_call(client: Client) -> Call:
    async def call(kind: str, argument: Any) -> None:
        if kind == "search":
            result = await client.call_tool("search", {"query": argument, "limit": 20})
        else:
            result = await client.call_tool("read_session", {"session_id": argument, "last": 20})
        assert not result.is_error, result.content

    return call


def api_call(http: httpx.AsyncClient) -> Call:
    async def call(kind: str, argument: Any) -> None:
        if kind == "search":
            response = await http.get("/v1/search", params={"q": argument, "limit": 20})
        else:
            response = await http.get(f"/v1/sessions/{argument}/events", params={"last": 20})
        response.raise_for_status()
        response.json()

    return call


async def run_all(db: Path, base: str, asks: dict[str, list[tuple[str, Any]]]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    stdio = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentjournal.cli", "mcp", "--db", str(db)],
        env={key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ},
    )
    async with Client(stdio, cache=None) as client:
        for kind, planned in asks.items():
            results[("MCP stdio", kind)] = await measure(mcp_call(client), planned)
    async with Client(f"{base}/mcp", cache=None) as client:
        for kind, planned in asks.items():
            results[("MCP HTTP", kind)] = await measure(mcp_call(client), planned)
    async with httpx.AsyncClient(base_url=base, timeout=60.0) as http:
        for kind, planned in asks.items():
            results[("HTTP API", kind)] = await measure(api_call(http), planned)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=300, help="calls of each kind")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", help="directory for the SQLite file (default: temp)")
    parser.add_argument("--db", help="a journal a run built (--keep), used as it is")
    parser.add_argument("--keep", help="build the journal at this path and keep it")
    args = parser.parse_args()
    events = 3_000 if args.quick else args.events
    repeats = 20 if args.quick else args.repeats
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731

    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        db = Path(args.db or args.keep or Path(folder) / "bench.db")
        if args.db is None:
            say(f"building {events:,} events")
            started = time.perf_counter()
            with Journal(SQLiteStorage(db, "normal")) as journal:
                build(journal, events, say)
                journal.search("order")  # the index catches up with the build's last events
            say(f"  built in {time.perf_counter() - started:.0f} s")
        with Journal.open(db) as journal:
            sessions = [s.session_id for s in journal.sessions(limit=1000)]
        if args.db is not None:  # as search_bench.py built it: full sessions
            events = len(sessions) * SESSION_LENGTH
        rng = random.Random(5)
        words = list(queries(events).values())
        asks = {
            "search": [("search", words[i % len(words)]) for i in range(repeats)],
            "read": [("read", rng.choice(sessions)) for _ in range(repeats)],
        }
        with serving(db) as base:
            say("measuring: MCP over stdio, MCP over HTTP, the HTTP API")
            results = asyncio.run(run_all(db, base, asks))

    title = f"MCP recall tools · {events:,} events · SQLite{' · QUICK' if args.quick else ''}"
    table = Table(title=title)
    for column in ("call", "through", "p50", "p99", "calls"):
        table.add_column(column)
    names = {"search": "search (20 hits)", "read": "read the newest 20 events"}
    for kind, name in names.items():
        for through in ("MCP stdio", "MCP HTTP", "HTTP API"):
            values = results[(through, kind)]
            table.add_row(
                name,
                through,
                f"{statistics.median(values):.1f} ms",
                f"{percentile(values, 0.99):.1f} ms",
                str(len(values)),
            )
    Console(width=110).print(table)


if __name__ == "__main__":
    main()

"""Streaming turns: how long a model's delta takes to reach the client through `POST
/v1/sessions/{id}/turns`, beside the same model server streamed directly, in the same run.

    .venv/bin/python bench/stream_bench.py            # the full run (a few minutes)
    .venv/bin/python bench/stream_bench.py --quick    # a smoke run (seconds; figures are rough)

The model is the fake OpenAI-compatible server of the test suite (tests/fake_model_servers.py),
in a process of its own: every reply is `chunks` text chunks, `interval` seconds apart, the
first `first_delay` seconds after the request (the model's time to its first token), and each
chunk's text is the server's `time.monotonic_ns()` taken just before it writes the chunk.
The client (asyncio + httpx + httpx-sse, in this process) subtracts that from its own monotonic
clock when the delta arrives (same machine, same clock), so each figure is "the model server
sent it" → "the client has it":

- direct (the baseline): the client streams `POST /v1/chat/completions` from the fake server
  itself with httpx-sse and reads each chunk's `delta.content`.
- OpenAIChatModel.stream(): the runtime's model, in this process, streaming the same reply
  through the official `openai` client: what the client library costs, without the service.
- through /turns: `agentjournal serve --agent openai` (a subprocess, the CLI a user runs,
  `OPENAI_BASE_URL` pointing at the fake server, durability `full`) runs each turn; the client
  posts it with `Accept: text/event-stream` and reads each `text_delta` frame. Every turn is on a
  fresh session, so every model call is the same.

At concurrency C, C streams run at once (C direct, then C through the model, then C turns), for
`rounds` rounds; the paths alternate round by round so all see the same machine. "first delta"
is each stream's first chunk; "every delta" is all of them. Overhead = the row's figure − the
direct figure at the same percentile and concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
from rich.console import Console
from rich.table import Table

from agentjournal.runtime import OpenAIChatModel, TextDelta
from http_bench import Server, running
from journal_bench import figure, source_fingerprint

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fake_model_servers.py"
P99_OVERHEAD_TARGET = 0.005  # s, p99 overhead of /turns over the direct stream at one turn


@dataclass(frozen=True)
class Plan:
    chunks: int  # text chunks per reply
    interval: float  # s between chunks
    first_delay: float  # s from the request to the first text chunk (the model's first token)
    concurrency: tuple[int, ...]
    rounds: dict[int, int]  # concurrency -> rounds


FULL = Plan(40, 0.01, 0.05, (1, 100), {1: 100, 100: 5})
QUICK = Plan(5, 0.005, 0.005, (1, 4), {1: 3, 4: 1})


def parse_stamps(text: str) -> list[int]:
    return [int(part) for part in text.replace(">", "").split("<") if part]


@dataclass
class Side:
    """One side's samples at one concurrency, in nanoseconds."""

    first: list[int] = field(default_factory=list)
    every: list[int] = field(default_factory=list)
    streams: int = 0
    complete: int = 0  # streams that got every chunk, in order
    failures: list[str] = field(default_factory=list)  # streams that broke: why


def record(side: Side, outcome: tuple[list[int], list[int]] | BaseException, chunks: int) -> None:
    side.streams += 1
    if isinstance(outcome, BaseException):
        side.failures.append(f"{type(outcome).__name__}: {outcome}")
        return
    latencies, stamps = outcome
    if latencies:
        side.first.append(latencies[0])
        side.every.extend(latencies)
    if len(stamps) == chunks and stamps == sorted(stamps):
        side.complete += 1


@contextlib.contextmanager
def fake_model(plan: Plan) -> Iterator[str]:
    """The fake OpenAI server in its own process; yields its URL."""
    command = [sys.executable, str(FAKE), "--chunks", str(plan.chunks)]
    command += ["--interval", str(plan.interval), "--first-delay", str(plan.first_delay)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the fake model server did not start: {url!r}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)


async def direct(client: httpx.AsyncClient, url: str) -> tuple[list[int], list[int]]:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    latencies: list[int] = []
    stamps: list[int] = []
    async with httpx_sse.aconnect_sse(
        client, "POST", f"{url}/v1/chat/completions", json=body
    ) as source:
        async for sse in source.aiter_sse():
            now = time.monotonic_ns()
            if sse.data == "[DONE]":
                break
            for choice in json.loads(sse.data)["choices"]:
                sent = parse_stamps(choice["delta"].get("content") or "")
                stamps += sent
                latencies += [now - stamp for stamp in sent]
    return latencies, stamps


async def through_turns(client: httpx.AsyncClient, session_id: str) -> tuple[list[int], list[int]]:
    latencies: list[int] = []
    stamps: list[int] = []
    async with httpx_sse.aconnect_sse(
        client, "POST", f"/v1/sessions/{session_id}/turns", json={"content": "go"}
    ) as source:
        source.response.raise_for_status()
        async for sse in source.aiter_sse():
            now = time.monotonic_ns()
            if sse.event == "text_delta":
                sent = parse_stamps(json.loads(sse.data)["text"])
                stamps += sent
                latencies += [now - stamp for stamp in sent]
            elif sse.event == "error":
                raise RuntimeError(f"the turn failed: {sse.data}")
    return latencies, stamps


async def via_model(model: OpenAIChatModel) -> tuple[list[int], list[int]]:
    latencies: list[int] = []
    stamps: list[int] = []
    async for chunk in model.stream([{"role": "user", "content": "go"}], []):
        now = time.monotonic_ns()
        if isinstance(chunk, TextDelta):
            sent = parse_stamps(chunk.text)
            stamps += sent
            latencies += [now - stamp for stamp in sent]
    return latencies, stamps


PATHS = ("direct (httpx-sse)", "OpenAIChatModel.stream()", "through /turns")


async def measure(plan: Plan, model_url: str, server: Server) -> dict[int, dict[str, Side]]:
    most = max(plan.concurrency)
    # The client lets an idle connection go (2 s) before uvicorn does (5 s): reusing one the
    # server is closing at that moment breaks the request, and that is not what is measured.
    limits = httpx.Limits(
        max_connections=most, max_keepalive_connections=most, keepalive_expiry=2.0
    )
    timeout = httpx.Timeout(120.0)
    results: dict[int, dict[str, Side]] = {}
    model = OpenAIChatModel("bench", base_url=f"{model_url}/v1", api_key="bench", retries=0)
    async with (
        httpx.AsyncClient(limits=limits, timeout=timeout) as model_client,
        httpx.AsyncClient(
            base_url=server.base_url, headers=server.headers, limits=limits, timeout=timeout
        ) as api,
    ):

        async def new_session() -> str:
            made = await api.post("/v1/sessions", json={"metadata": {"agent": "openai"}})
            made.raise_for_status()
            return str(made.json()["session_id"])

        # Warm every path (connections, imports, the server's first turn) before timing.
        await direct(model_client, model_url)
        await via_model(model)
        await through_turns(api, await new_session())
        for concurrency in plan.concurrency:
            sides = {path: Side() for path in PATHS}
            for _ in range(plan.rounds[concurrency]):
                for outcome in await asyncio.gather(
                    *(direct(model_client, model_url) for _ in range(concurrency)),
                    return_exceptions=True,
                ):
                    record(sides[PATHS[0]], outcome, plan.chunks)
                for outcome in await asyncio.gather(
                    *(via_model(model) for _ in range(concurrency)), return_exceptions=True
                ):
                    record(sides[PATHS[1]], outcome, plan.chunks)
                sessions = await asyncio.gather(*(new_session() for _ in range(concurrency)))
                for outcome in await asyncio.gather(
                    *(through_turns(api, session) for session in sessions),
                    return_exceptions=True,
                ):
                    record(sides[PATHS[2]], outcome, plan.chunks)
            results[concurrency] = sides
    await model.aclose()
    return results


def percentile(samples: Sequence[int], q: float) -> float | None:
    """The q-th percentile (nearest rank) in seconds, or None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank] / 1e9


def rows_of(results: dict[int, dict[str, Side]]) -> list[dict[str, Any]]:
    rows = []
    for concurrency, sides in results.items():
        turns = "turn" if concurrency == 1 else "turns"
        for what, pick in (("first delta", "first"), ("every delta", "every")):
            base = getattr(sides[PATHS[0]], pick)
            for path in PATHS:
                side = sides[path]
                samples = getattr(side, pick)
                p50, p99 = percentile(samples, 50), percentile(samples, 99)
                over50 = over99 = met = None
                if path != PATHS[0] and p50 is not None and p99 is not None and base:
                    over50 = p50 - (percentile(base, 50) or 0.0)
                    over99 = p99 - (percentile(base, 99) or 0.0)
                targeted = concurrency == 1 and path == PATHS[2]
                if targeted and over99 is not None:
                    met = "yes" if over99 < P99_OVERHEAD_TARGET else "NO"
                rows.append(
                    {
                        "bench": f"{what} @{concurrency} {turns} · {path}",
                        "p50": p50,
                        "p99": p99,
                        "overhead p50": over50,
                        "overhead p99": over99,
                        "target": "p99 overhead < 5 ms" if targeted else "—",
                        "met?": met or "—",
                        "samples": str(len(samples)),
                        "complete": f"{side.complete}/{side.streams}",
                        "failures": side.failures,
                    }
                )
    return rows


def render(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="streamed deltas: model server sent → client received")
    columns = ["benchmark", "p50", "p99", "overhead p50", "overhead p99", "target", "met?"]
    columns += ["samples", "streams complete"]
    for column in columns:
        table.add_column(column, justify="left" if column == "benchmark" else "right")
    for row in rows:
        times = (figure(row[key], "s") for key in ("p50", "p99", "overhead p50", "overhead p99"))
        table.add_row(
            row["bench"], *times, row["target"], row["met?"], row["samples"], row["complete"]
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, seconds")
    parser.add_argument("--dir", help="where the temporary database goes (default: the temp dir)")
    parser.add_argument(
        "--first-delay", type=float, help="s before the first text chunk (default: the plan's)"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.first_delay is not None:
        plan = dataclasses.replace(plan, first_delay=args.first_delay)
    console = Console(width=None if sys.stdout.isatty() else 200)
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(dir=args.dir) as workdir,
        fake_model(plan) as model_url,
    ):
        os.environ.update(
            OPENAI_BASE_URL=f"{model_url}/v1", OPENAI_API_KEY="bench", AGENTJOURNAL_MODEL="bench"
        )
        limits = ("--max-streams-per-key", "1000", "--rate-limit", "1000000")
        with running(Path(workdir), "turns", "--agent", "openai", *limits) as server:
            results = asyncio.run(measure(plan, model_url, server))
            broken = [
                f for sides in results.values() for side in sides.values() for f in side.failures
            ]
            if broken:  # what the server said about them, for whoever reads the run
                print(server.log.read_text()[-6000:], file=sys.stderr)
    console.print(
        f"{datetime.date.today()} · {'QUICK (smoke) run' if args.quick else 'full run'} · "
        f"Python {platform.python_version()} · {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} CPUs · {plan.chunks} chunks {plan.interval * 1e3:g} ms apart, the"
        f" first {plan.first_delay * 1e3:g} ms after the request ·"
        f" src {source_fingerprint()} · {time.perf_counter() - started:.0f} s",
        highlight=False,
    )
    rows = rows_of(results)
    render(rows, console)
    console.print(
        "- overhead: the row's percentile minus the direct (httpx-sse) one at the same"
        " concurrency; 'streams complete': streams that got every chunk, in order.",
        highlight=False,
        soft_wrap=True,
    )
    for row in rows:
        reasons = sorted(set(row["failures"]))
        if reasons and row["bench"].startswith("first"):
            console.print(
                f"- {row['bench']}: {len(row['failures'])} streams broke: {'; '.join(reasons)}",
                highlight=False,
                soft_wrap=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

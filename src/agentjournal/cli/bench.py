"""`bench`: how fast this machine's disk (or this PostgreSQL) takes durable appends."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentjournal.cli.app import app
from agentjournal.cli.common import JsonOption, console, opened, print_json
from agentjournal.journal import Journal

__all__: list[str] = []


@app.command()
def bench(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Journal to measure (a session is written, then purged). Default: a"
            " temporary SQLite file in --dir.",
        ),
    ] = None,
    directory: Annotated[
        Path,
        typer.Option(
            "--dir",
            exists=True,
            file_okay=False,
            writable=True,
            help="Where the temporary SQLite file goes (its disk).",
        ),
    ] = Path("."),
    seconds: Annotated[float, typer.Option(help="Seconds per measurement.", min=0.2)] = 2.0,
    writers: Annotated[int, typer.Option(help="Concurrent writers.", min=2, max=64)] = 16,
    as_json: JsonOption = False,
) -> None:
    """Measure durable appends here: one writer, concurrent writers, and 100-event batches.

    For the comparisons against raw sqlite3 and psycopg baselines, run `make bench` in a
    checkout (bench/README.md); this command answers "how fast is this disk or database".

    Example: agentjournal bench --dir /var/lib/agents --seconds 5
    """
    with tempfile.TemporaryDirectory(dir=directory, prefix="aj-bench-") as tmp:
        target = db if db is not None else str(Path(tmp) / "bench.db")
        with opened(target, create=True) as journal:
            figures = _measure(journal, seconds, writers)
    if as_json:
        print_json(figures)
        return
    table = Table("measurement")
    for column in ("events/s", "p50 latency", "p99 latency"):
        table.add_column(column, justify="right")
    for name, (rate, p50, p99) in figures.items():
        table.add_row(name, f"{rate:,.0f}", f"{p50 * 1e3:,.2f} ms", f"{p99 * 1e3:,.2f} ms")
    console.print(table)


def _measure(
    journal: Journal, seconds: float, writers: int
) -> dict[str, tuple[float, float, float]]:
    session = journal.create_session("agentjournal bench").session_id
    try:
        one = {"content": "x" * 200}
        batch = [{"type": "user_message", "payload": one}] * 100
        return {
            "append, one writer": _run(
                lambda: journal.append(session, "user_message", one), 1, 1, seconds
            ),
            f"append, {writers} writers": _run(
                lambda: journal.append(session, "user_message", one), writers, 1, seconds
            ),
            "append_many(100), one writer": _run(
                lambda: journal.append_many(session, batch), 1, 100, seconds
            ),
        }
    finally:
        journal.purge_session(session, actor="agentjournal bench")


def _run(
    call: Callable[[], object], threads: int, events_per_call: int, seconds: float
) -> tuple[float, float, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        mine = []
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            call()
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return len(latencies) * events_per_call / elapsed, statistics.median(ordered), p99

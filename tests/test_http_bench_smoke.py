"""`bench/http_bench.py --quick` runs against a real `agentjournal serve` and prints every
benchmark of its table (behaviour only: the figures are measured by a full run, never asserted in
tests), and leaves no server process or temporary file behind."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from bench_runs import run_quick

BENCHMARKS = [
    "appends/s over HTTP, 32 clients",
    "append latency p50, 32 clients",
    "append latency p99, 32 clients",
    "ack → stream delay, median",
    "ack → stream delay, p99",
    "append sent → on the stream, median",
    "SSE fan-out @50: every event to each",
    "SSE fan-out @50: delay p50 (from ack)",
    "SSE fan-out @50: delay p99 (from ack)",
    "SSE fan-out @50: delay p99 (from send)",
    "SSE fan-out @50: server RSS holding them",
]
COLUMNS = ["benchmark", "over HTTP", "in-process", "vs in-process", "target", "met?", "peak RSS"]


def _servers_of(db_dir: Path) -> list[int]:
    """Pids of live processes serving a database under `db_dir` (Linux; none elsewhere)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in command and any(str(db_dir).encode() in part for part in command):
            pids.append(int(proc.name))
    return pids


def test_quick_run_prints_every_benchmark_and_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    out = run_quick("http_bench.py", tmp_path, timeout=120, env=env)
    for name in BENCHMARKS + COLUMNS:
        assert name in out, f"{name!r} missing from:\n{out}"
    assert "QUICK" in out
    # Every quick fan-out subscriber received every event, in order, once.
    assert "50/50 complete" in out, out
    assert re.search(r"50 of 50 subscribers received exactly seq 1\.\.\d+, in order", out), out
    # The delay target has a verdict; every row names the server's peak RSS.
    assert re.search(r"ack → stream delay, median .*│ +(yes|NO) +│ +\d+ MB", out), out
    # No server left running, no database or log left behind.
    assert _servers_of(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_wrk_quick_run_prints_the_table_or_how_to_install_wrk(tmp_path: Path) -> None:
    """The wrk scenario: with wrk, a row per server, every response a 201; without it, how to
    install it (and nothing measured)."""
    env = {**os.environ, "COLUMNS": "200"}
    out = run_quick("http_wrk_bench.py", tmp_path, timeout=180, env=env)
    if shutil.which("wrk") is None:
        assert "apt-get install wrk" in out, out
    else:
        # The 0.1.0 service is measured from commit 5711f93, when the clone has it.
        old = "is not in this clone" not in out
        servers = [
            "floor: bare ASGI",
            "floor (Starlette route)",
            "agentjournal serve (this checkout)",
        ]
        servers += ["agentjournal serve @ 5711f93 (0.1.0)"] if old else []
        for name in [*servers, "appends/s", "p99 ms", "vs floor"]:
            assert name in out, f"{name!r} missing from:\n{out}"
        # No request failed or was refused (a 4xx or 5xx would be counted here).
        rows = re.findall(r"│ (floor|agentjournal serve)[^│]*│.*│ +(\d+) │", out)
        assert [errors for _, errors in rows] == ["0"] * len(servers), out
    assert _servers_of(tmp_path) == []
    assert list(tmp_path.iterdir()) == []

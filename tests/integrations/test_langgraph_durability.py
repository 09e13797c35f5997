"""`JournalSaver` under SIGKILL and beside another process, on real SQLite files.

A child process (tests/helpers/langgraph_runner.py) runs a looping graph, two parallel nodes and
a join per step, with `durability="sync"`, and is SIGKILLed at a random moment 20 times over; each
new child resumes the thread from its last checkpoint. After every kill: the thread's state is
whole steps plus at most a part of the next, nothing twice; every step that a later step had
started on is there (a completed step is never lost); a node whose writes were saved before the
kill does not run again; `verify()` is clean. Then two processes run different threads on one
file at once. A failure prints its seed; rerun with AGENTJOURNAL_CRASH_SEED=<seed>.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langgraph")

from agentjournal.integrations.langgraph import JournalSaver

HELPER = Path(__file__).parent.parent / "helpers" / "langgraph_runner.py"
WAIT = 60.0  # seconds: the most any single step may take before the test fails instead of hanging
KILLS = 20


def load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("langgraph_runner", HELPER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its state schema's annotations are resolved through it
    spec.loader.exec_module(module)
    return module


runner = load_helper()


def check_log(log: list[str]) -> int:
    """The log is whole steps (a<k> and b<k> in either order, then j<k>, k = 0, 1, ...) and at
    most a part of the next one; returns the number of whole steps."""
    steps = 0
    index = 0
    while index < len(log):
        group = log[index : index + 3]
        if len(group) == 3 and sorted(group[:2]) == [f"a{steps}", f"b{steps}"]:
            assert group[2] == f"j{steps}", log[-12:]
            steps += 1
            index += 3
            continue
        assert set(group) <= {f"a{steps}", f"b{steps}"}, log[-12:]
        assert len(set(group)) == len(group), log[-12:]
        assert len(group) < 3, log[-12:]
        break
    return steps


def saved_state(path: str, thread: str) -> tuple[list[str], set[str]]:
    """The thread's log (its latest checkpoint's, with the writes saved since applied, as
    `get_state` shows it) and the log entries of those saved writes: the nodes that completed
    after the checkpoint, and must not run again."""
    with JournalSaver.from_conn_string(path) as saver:
        state = runner.build(saver).get_state(runner.config(thread))
        latest = saver.get_tuple(runner.config(thread))
        assert saver.journal.verify().ok
    saved: set[str] = set()
    for _, channel, value in (latest.pending_writes or []) if latest else []:
        if channel == "log":
            saved.update(value)
    return list(state.values.get("log", [])), saved


class CrashServer:
    """The helper in `crash` mode: forks one child per `run`, reports the nodes it started."""

    def __init__(self, path: str, thread: str, logs: Path) -> None:
        self.stderr_path = logs / "langgraph-runner.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(HELPER), "crash", path, thread],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                encoding="utf-8",
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.child: int | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self) -> str:
        line = self.lines.get(timeout=WAIT)
        tail = self.stderr_path.read_text(encoding="utf-8")[-2000:]
        assert line is not None, f"the runner ended: {tail}"
        assert not line.startswith("error"), f"{line}\n{tail}"
        return line

    def run(self, nodes: int, delay: float) -> list[tuple[str, int]]:
        """Fork a child, SIGKILL it `delay` seconds after it started its `nodes`-th node;
        return every node it started, as (name, k)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        word, pid = self.line().split()
        assert word == "started", word
        self.child = int(pid)
        ran: list[tuple[str, int]] = []
        while len(ran) < nodes:
            ran.append(self.ran(self.line()))
        time.sleep(delay)  # not a synchronisation: where in its next step the kill lands
        os.kill(self.child, signal.SIGKILL)
        while (line := self.line()) != f"exited {pid} {-signal.SIGKILL}":
            ran.append(self.ran(line))
        self.child = None
        return ran

    @staticmethod
    def ran(line: str) -> tuple[str, int]:
        word, name, k = line.split()
        assert word == "ran", line
        return name, int(k)

    def close(self) -> None:
        if self.child is not None:
            os.kill(self.child, signal.SIGKILL)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(WAIT)
            self.reader.join(WAIT)
            self.proc.stdout.close()


@pytest.mark.slow
def test_sigkill_between_steps_resumes_and_loses_no_completed_step(tmp_path: Path) -> None:
    seed = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    path = str(tmp_path / "agent.db")
    thread = "order-42"
    server = CrashServer(path, thread, tmp_path)
    steps = 0
    pending: set[str] = set()
    try:
        for kill in range(KILLS):
            ran = server.run(rng.randint(1, 12), rng.choice([0.0, rng.uniform(0.0, 0.03)]))
            where = f"seed {seed}, kill {kill}"
            # A node whose writes were saved before the last kill is not run again.
            again = {f"{name}{k}" for name, k in ran} & pending
            assert not again, (where, again)
            log, pending = saved_state(path, thread)
            done = check_log(log)
            # A node of step k starts only once step k-1's checkpoint is durable.
            started = max(k for _, k in ran)
            assert done >= started, (where, done, started)
            assert done >= steps, (where, done, steps)
            steps = done
    finally:
        server.close()
    assert steps > 0


@pytest.mark.slow
def test_two_processes_run_different_threads_on_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.db")
    procs = [
        subprocess.Popen(
            [sys.executable, str(HELPER), "steps", path, thread, "15"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for thread in ("thread-a", "thread-b")
    ]
    outputs: list[Any] = [proc.communicate(timeout=WAIT * 2) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "done"
    for thread in ("thread-a", "thread-b"):
        log, pending = saved_state(path, thread)
        assert check_log(log) == 15
        assert len(log) == 45
        assert pending == set()

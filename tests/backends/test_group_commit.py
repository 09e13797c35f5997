"""Group commit's promise when the shared transaction itself fails: every caller in it gets an
error, none a result, and the next commit starts clean. The control is a scripted stand-in for a
connection, as a database cannot be made to fail a SAVEPOINT on cue."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from agentjournal.backends.group_commit import GroupCommit

WAIT = 10.0


class ScriptedControl:
    """Logs each statement; BEGIN waits for `gate`, and the first SAVEPOINT fails."""

    def __init__(self) -> None:
        self.tx = object()
        self.log: list[str] = []
        self.gate = threading.Event()
        self.fail_savepoint = True

    def begin(self) -> None:
        self.log.append("begin")
        assert self.gate.wait(WAIT)

    def commit(self) -> None:
        self.log.append("commit")

    def rollback(self) -> None:
        self.log.append("rollback")

    def savepoint(self) -> None:
        self.log.append("savepoint")
        if self.fail_savepoint:
            self.fail_savepoint = False
            raise OSError("disk I/O error")

    def release(self) -> None:
        self.log.append("release")

    def rollback_to_savepoint(self) -> None:
        self.log.append("rollback to savepoint")

    def failed_commit(self, exc: BaseException) -> BaseException:
        return exc


def write(tx: Any, items: Sequence[str]) -> list[str]:
    return [f"wrote {item}" for item in items]


def test_a_failed_savepoint_fails_every_caller_of_the_batch_and_commits_nothing() -> None:
    control = ScriptedControl()
    commits = GroupCommit(control, on_commit=lambda: None)
    outcomes: dict[str, Any] = {}

    def submit(item: str) -> None:
        try:
            outcomes[item] = commits.submit_grouped(write, item)
        except OSError as exc:
            outcomes[item] = exc

    threads = [threading.Thread(target=submit, args=(name,)) for name in ("a", "b", "c")]
    threads[0].start()  # leads, and waits in BEGIN ...
    deadline = time.monotonic() + WAIT
    while control.log != ["begin"]:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    for thread in threads[1:]:
        thread.start()  # ... while the others queue up to join its transaction
    while len(commits._queue) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    control.gate.set()
    for thread in threads:
        thread.join(WAIT)

    assert sorted(outcomes) == ["a", "b", "c"]
    assert all(isinstance(outcome, OSError) for outcome in outcomes.values()), outcomes
    assert control.log == ["begin", "savepoint", "rollback"]
    # The next caller finds no transaction left open, and commits.
    assert commits.submit_grouped(write, "d") == "wrote d"
    assert control.log[-2:] == ["begin", "commit"]

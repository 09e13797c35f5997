"""The agent a server runs (`serve --agent`): start-up recovery, turns on their own threads, the
agent's task worker, and retries of turns that resume could not finish.

Turns run on a thread pool of their own, not on the request's task: a client that disconnects
does not stop its turn, and the journal's worker threads are not held while a model thinks.
A streamed turn (and every turn resume finishes) records its frames in `frames`
(server/turn_frames.py), where a client that reconnects finds them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from agentjournal.errors import JournalError
from agentjournal.events import Event
from agentjournal.journal import MAX_PAGE, Journal
from agentjournal.runtime import Agent, TurnControl, TurnResult, Worker
from agentjournal.runtime.resume import ResumeReport, resume_incomplete
from agentjournal.server.problems import journal_problem, problem_body
from agentjournal.server.turn_frames import TurnFrames, TurnLog

__all__ = ["AgentHost"]

log = logging.getLogger("agentjournal.server")


class AgentHost:
    def __init__(
        self,
        agent: Agent,
        journal: Journal,
        *,
        max_turns: int = 32,
        retry_seconds: float = 30.0,
        lease_seconds: float = 10.0,
    ) -> None:
        self.agent = agent
        self.journal = journal
        self.retry_seconds = retry_seconds
        self.lease_seconds = lease_seconds
        self._pool = ThreadPoolExecutor(max_turns, thread_name_prefix="agentjournal-turn")
        self._running: set[tuple[str, str]] = set()
        # The controls of the turns running now, and whether `stop` abandons them (a turn that
        # starts after that is abandoned as it registers: both happen under `_lock`).
        self._controls: set[TurnControl] = set()
        self._abandoning = False
        self._unfinished: set[tuple[str, str]] = set()  # (tenant, session id) resume left open
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified as each turn ends
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.frames = TurnFrames()

    def start(self) -> None:
        """Before the first request: settle expired leases, finish cut turns, start the worker.
        Never fails start-up over one turn: what it cannot finish is retried later."""
        recovery = self.journal.recover(all_tenants=True)
        report = self._resume()
        log.info(
            "recover: %d tasks requeued, %d failed; resume: %d turns finished, %d left",
            len(recovery.requeued),
            len(recovery.failed),
            len(report.finished),
            len(report.failed),
        )
        self._unfinished = {(turn.tenant, turn.session_id) for turn in report.failed}
        self._spawn(self._retry_unfinished, "agentjournal-resume")
        if self.agent.task_handlers:
            worker = Worker(
                self.journal, self.agent.task_handlers, lease_seconds=self.lease_seconds
            )
            self._spawn(lambda: worker.run(self._stop), "agentjournal-worker")

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Give running turns `grace_seconds` to finish, then abandon those still running: their
        model calls stop, nothing half-written is journaled, and each turn stays open for the
        next start to resume (as after a crash), so a model that stalls cannot hold shutdown.
        The task in hand gets `grace_seconds` too; one still running after that keeps its
        lease until it expires, and the next start retries it."""
        self._stop.set()
        with self._idle:
            self._idle.wait_for(lambda: not self._running, timeout=grace_seconds)
            self._abandoning = True
            controls = list(self._controls)
        for control in controls:
            control.abandon()
        self._pool.shutdown(wait=True)
        for thread in self._threads:
            thread.join(grace_seconds)
        self.agent.close()

    def run_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        on_event: Callable[[Event], None] | None = None,
        *,
        started: Callable[[TurnLog], None] | None = None,
    ) -> asyncio.Future[TurnResult]:
        """Start a turn on the pool; the awaitable result does not own the turn (cancelling it
        leaves the turn running). With `started`, the turn streams: its frames go to `frames`,
        and `started` gets its log once its user_message is journaled (on the turn's thread)."""
        future: Future[TurnResult] = self._pool.submit(
            self._turn, journal, session_id, text, idempotency_key, on_event, started
        )
        return asyncio.wrap_future(future)

    def _turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        on_event: Callable[[Event], None] | None,
        started: Callable[[TurnLog], None] | None,
    ) -> TurnResult:
        key = (journal.tenant, session_id)
        with self._lock:
            self._running.add(key)
        try:
            if started is None:
                return self.agent.run_turn(
                    journal, session_id, text, idempotency_key=idempotency_key, on_event=on_event
                )
            recorder = _Recorder(self.frames, journal.tenant, session_id, started)
            with recorder, self._registered(recorder.control):
                return self.agent.run_turn(
                    journal,
                    session_id,
                    text,
                    idempotency_key=idempotency_key,
                    on_event=recorder.event,
                    on_delta=recorder.delta,
                    control=recorder.control,
                )
        finally:
            with self._lock:
                self._running.discard(key)
                self._idle.notify_all()

    def _finish(self, journal: Journal, session_id: str) -> TurnResult | None:
        """`Agent.finish_turn`, streaming into `frames` as a new run of the turn, so a client
        that reconnects to it gets the new answer (after a `reset`)."""
        turn = _open_turn(journal, session_id)
        if turn is None:  # no user message to hang a stream on: finish it unstreamed
            return self.agent.finish_turn(journal, session_id)
        recorder = _Recorder(self.frames, journal.tenant, session_id)
        log = recorder.begin(turn)
        # The new run starts with what the turn journaled before it was cut, so a stream of the
        # turn always reads from its user_message.
        for event in journal.events(session_id, after=turn - 1, limit=MAX_PAGE):
            log.event(event)
        with recorder, self._registered(recorder.control):
            return self.agent.finish_turn(
                journal,
                session_id,
                on_delta=recorder.delta,
                on_event=recorder.event,
                control=recorder.control,
            )

    @contextmanager
    def _registered(self, control: TurnControl) -> Iterator[None]:
        """`control` is abandoned by `stop` while this holds (at once, if it has begun)."""
        with self._lock:
            self._controls.add(control)
            if self._abandoning:
                control.abandon()
        try:
            yield
        finally:
            with self._lock:
                self._controls.discard(control)

    def _resume(self) -> ResumeReport:
        return resume_incomplete(self.journal, [self.agent], all_tenants=True, finish=self._finish)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _retry_unfinished(self) -> None:
        while self._unfinished and not self._stop.wait(self.retry_seconds):
            for tenant, session_id in list(self._unfinished):
                if (tenant, session_id) in self._running:
                    continue
                try:
                    self._finish(self.journal.for_tenant(tenant), session_id)
                except Exception as exc:  # still down: try again next round
                    log.warning("turn of %s still unfinished: %s", session_id, exc)
                    continue
                self._unfinished.discard((tenant, session_id))


class _Recorder:
    """Hands one run of a turn to its `TurnLog`: the log begins at the turn's user_message (or
    at `begin` for a turn resumed), and ends with the turn, after an `error` frame if it
    failed."""

    def __init__(
        self,
        frames: TurnFrames,
        tenant: str,
        session_id: str,
        started: Callable[[TurnLog], None] | None = None,
    ) -> None:
        self.frames, self.tenant, self.session_id = frames, tenant, session_id
        self.started = started
        self.control = TurnControl()
        self.log: TurnLog | None = None

    def begin(self, turn: int) -> TurnLog:
        self.log = self.frames.begin((self.tenant, self.session_id, turn), self.control)
        if self.started is not None:
            self.started(self.log)
        return self.log

    def event(self, event: Event) -> None:
        log = self.log if self.log is not None else self.begin(event.seq)
        log.event(event)

    def delta(self, delta: Any) -> None:
        if self.log is not None:
            self.log.delta(delta)

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, trace: Any) -> None:
        if self.log is None:
            return
        if error is not None:
            if isinstance(error, JournalError):
                problem = problem_body(*journal_problem(error), str(error))
            else:
                problem = problem_body(500, "Internal error", f"{type(error).__name__}: {error}")
            self.log.error(problem)
        self.log.end()


def _open_turn(journal: Journal, session_id: str) -> int | None:
    """The seq of the user_message that opened the session's unfinished turn, reading
    backwards from its end (a turn is a handful of events)."""
    before = journal.get_session(session_id).last_seq + 1
    while before > 1:
        page = journal.events(session_id, before=before, limit=MAX_PAGE)
        if not page:
            return None
        for event in reversed(page):
            if event.type == "user_message" and "supersedes" not in event.payload:
                return int(event.seq)
        before = page[0].seq
    return None

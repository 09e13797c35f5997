"""The agent a server runs (`serve --agent`): start-up recovery, turns on their own threads, the
agent's task worker, and retries of turns that resume could not finish.

Turns run on a thread pool of their own, not on the request's task: a client that disconnects
does not stop its turn, and the journal's worker threads are not held while a model thinks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from agentjournal.events import Event
from agentjournal.journal import Journal
from agentjournal.runtime import Agent, TurnResult, Worker, resume_incomplete

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
        self._unfinished: dict[str, str] = {}  # session id -> tenant, turns resume left open
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Before the first request: settle expired leases, finish cut turns, start the worker.
        Never fails start-up over one turn: what it cannot finish is retried later."""
        recovery = self.journal.recover(all_tenants=True)
        report = resume_incomplete(self.journal, [self.agent], all_tenants=True)
        log.info(
            "recover: %d tasks requeued, %d failed; resume: %d turns finished, %d left",
            len(recovery.requeued),
            len(recovery.failed),
            len(report.finished),
            len(report.failed),
        )
        tenants = {s.session_id: s.tenant for s in recovery.open_turns}
        self._unfinished = {sid: tenants.get(sid, self.journal.tenant) for sid, _ in report.failed}
        self._spawn(self._retry_unfinished, "agentjournal-resume")
        if self.agent.task_handlers:
            worker = Worker(
                self.journal, self.agent.task_handlers, lease_seconds=self.lease_seconds
            )
            self._spawn(lambda: worker.run(self._stop), "agentjournal-worker")

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Let running turns finish, give the task in hand `grace_seconds`, then stop. A task
        still running after that keeps its lease until it expires; the next start retries it."""
        self._stop.set()
        self._pool.shutdown(wait=True)
        for thread in self._threads:
            thread.join(grace_seconds)

    def run_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        on_event: Callable[[Event], None] | None = None,
    ) -> asyncio.Future[TurnResult]:
        """Start a turn on the pool; the awaitable result does not own the turn (cancelling it
        leaves the turn running)."""
        future: Future[TurnResult] = self._pool.submit(
            self._turn, journal, session_id, text, idempotency_key, on_event
        )
        return asyncio.wrap_future(future)

    def _turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        idempotency_key: str | None,
        on_event: Callable[[Event], None] | None,
    ) -> TurnResult:
        key = (journal.tenant, session_id)
        with self._lock:
            self._running.add(key)
        try:
            return self.agent.run_turn(
                journal, session_id, text, idempotency_key=idempotency_key, on_event=on_event
            )
        finally:
            with self._lock:
                self._running.discard(key)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _retry_unfinished(self) -> None:
        while self._unfinished and not self._stop.wait(self.retry_seconds):
            for session_id, tenant in list(self._unfinished.items()):
                if (tenant, session_id) in self._running:
                    continue
                try:
                    self.agent.finish_turn(self.journal.for_tenant(tenant), session_id)
                except Exception as exc:  # still down: try again next round
                    log.warning("turn of %s still unfinished: %s", session_id, exc)
                    continue
                del self._unfinished[session_id]

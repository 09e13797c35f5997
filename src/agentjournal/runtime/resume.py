"""Finishing the turns a crash cut, at start-up or whenever asked."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from agentjournal.errors import Conflict
from agentjournal.journal import Journal
from agentjournal.runtime.agent import Agent, TurnResult

__all__ = ["ResumeReport", "UnfinishedTurn", "resume_incomplete"]

log = logging.getLogger("agentjournal.runtime")


class UnfinishedTurn(NamedTuple):
    """A cut turn that could not be finished, and why. The tenant is part of the session's
    name: with `all_tenants`, two tenants may each have a session of the id."""

    session_id: str
    reason: str
    tenant: str


@dataclass
class ResumeReport:
    """Turns finished now, and turns that could not be: call again later for those."""

    finished: list[TurnResult] = field(default_factory=list)
    failed: list[UnfinishedTurn] = field(default_factory=list)


def resume_incomplete(
    journal: Journal,
    agents: Iterable[Agent],
    *,
    all_tenants: bool = False,
    finish: Callable[[Journal, str], TurnResult | None] | None = None,
) -> ResumeReport:
    """Finish every cut turn in sessions whose `metadata.agent` names one of `agents` (never a
    chat whose replies come from elsewhere). Never raises for one session's trouble: it reports
    it (the model unreachable, say) and a later call tries again.

    A turn running meanwhile is held (`Journal.hold_turn`) and left alone: in this process, and
    on PostgreSQL in any instance. On SQLite, another process serving the same file is not seen:
    run one server per file, or resume only at its start-up.

    `finish(journal, session_id)`, if given, finishes each turn instead of the agent's own
    `finish_turn` (a server uses it to stream the new answer to clients that reconnect)."""
    by_name = {agent.name: agent for agent in agents}
    report = ResumeReport()
    for session in journal.open_turns(all_tenants=all_tenants):
        agent = by_name.get(str(session.metadata.get("agent")))
        if agent is None:
            continue
        scoped = journal if session.tenant == journal.tenant else journal.for_tenant(session.tenant)
        try:
            if finish is not None:
                result = finish(scoped, session.session_id)
            else:
                result = agent.finish_turn(scoped, session.session_id)
        except Conflict:
            continue  # running, not cut: its own process finishes it
        except Exception as exc:  # one session's failure must not stop the others, nor start-up
            log.warning("could not finish the turn of %s: %s", session.session_id, exc)
            reason = f"{type(exc).__name__}: {exc}"
            report.failed.append(UnfinishedTurn(session.session_id, reason, session.tenant))
            continue
        if result is not None:
            report.finished.append(result)
    return report

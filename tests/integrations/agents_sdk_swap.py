"""A pytest plugin for the Agents SDK's own test suite (loaded with `-p agents_sdk_swap` by
test_agents_sdk_suite.py, in a pytest of its own inside the SDK's source distribution): every
`SQLiteSession` the SDK's tests build is a `JournalSession` instead.

`SQLiteSession(session_id, db_path=":memory:", sessions_table=..., messages_table=...,
session_settings=None)` becomes a `JournalSession` over a journal of its own: at `db_path` for a
file (so two sessions given one file share one journal, as they share one database), and in a
fresh file under `AGENTJOURNAL_SDK_SUITE_TMP` for `":memory:"` (each `SQLiteSession` in memory is
a database of its own). The table names are SQLiteSession's own layout, not ours: accepted and
unused.

`AGENTJOURNAL_SDK_SUITE_DESELECT` (one node id prefix a line) names the tests not to run; a prefix
that names no collected test is an error, so that the list cannot outlive the tests it names.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest
from agents.memory import SessionSettings

from agentjournal import Journal
from agentjournal.integrations.openai_agents import JournalSession


class SQLiteJournalSession(JournalSession):
    """`SQLiteSession`'s constructor, building a `JournalSession`."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        if str(db_path) == ":memory:":
            folder = tempfile.mkdtemp(dir=os.environ.get("AGENTJOURNAL_SDK_SUITE_TMP"))
            path = str(Path(folder) / "journal.db")
        else:
            path = str(db_path)
        journal = Journal.open(path)
        try:
            super().__init__(session_id, journal, session_settings=session_settings)
        except BaseException:
            journal.close()
            raise
        self._owned = True
        self.db_path = db_path


def pytest_configure(config: pytest.Config) -> None:
    # Before collection, so that `from agents import SQLiteSession` in a test module finds ours.
    agents.SQLiteSession = SQLiteJournalSession  # type: ignore[misc,assignment]
    agents.memory.SQLiteSession = SQLiteJournalSession  # type: ignore[misc,assignment]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    prefixes = os.environ.get("AGENTJOURNAL_SDK_SUITE_DESELECT", "").split()
    unused = [p for p in prefixes if not any(item.nodeid.startswith(p) for item in items)]
    if unused:
        raise pytest.UsageError(f"no such tests in the SDK's suite: {', '.join(unused)}")
    chosen = tuple(prefixes)
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid.startswith(chosen)])
    items[:] = [item for item in items if not item.nodeid.startswith(chosen)]

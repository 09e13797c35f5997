"""The backend contract: the journal (docs/concepts.md) and its tasks, on every backend.

Every test here takes the `journal` fixture (tests/conftest.py), so SQLite (a file) and PostgreSQL
(a schema) run the same suite through the public `Journal` API. A rejected call must write
nothing: `rejected()` (helpers/contract.py, helpers/task_contract.py) compares everything the
public API shows, for two tenants, before and after. Raw SQL against the database (append-only
triggers, purge, corrupting projections for verify) goes through the `raw` fixture, on both
backends too. Task leases expire for real: a test claims with a tiny lease and polls the clock
until the lease is over; no test asserts a duration. Races run on real threads and real processes
sharing one database. Tests that only one backend has go beside it in tests/backends/.
"""

from __future__ import annotations

import pytest

from agentjournal import Journal
from helpers.contract import call, msg, result, seed


@pytest.fixture
def long_seed(journal: Journal) -> str:
    """The seed plus a second turn with a tool call: seq 8-11."""
    sid = seed(journal)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            call("call_2"),
            result("call_2", "43"),
            msg("assistant_message", "现在有 43 个。"),
        ],
    )
    return sid

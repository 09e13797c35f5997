"""Shared fixtures. `journal` is the contract fixture: every store test takes it, and every
backend agentjournal ships is a parameter of it (SQLite now; PostgreSQL joins with its issue)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentjournal import Journal


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def journal(backend: str, db_path: Path) -> Iterator[Journal]:
    with Journal.open(db_path) as opened:
        yield opened

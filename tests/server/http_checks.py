"""Checks the HTTP tests share: an RFC 9457 problem response, and what the database holds (read
straight from the file, read-only) to prove a refused request wrote nothing."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

import httpx

PROBLEM = "application/problem+json"


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is `status` as RFC 9457 problem+json with a non-empty `detail`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0].strip() == PROBLEM
    body = response.json()
    assert isinstance(body, dict)
    for field in ("type", "title", "detail"):
        assert isinstance(body[field], str), field
        assert body[field].strip(), field
    assert body["status"] == status
    return body


class Counts(NamedTuple):
    events: int
    sessions: int
    tasks: int


def db_counts(db_path: Path) -> Counts:
    """How many events, sessions and tasks the database file holds."""
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as raw:
        return Counts(
            *(
                int(raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                for table in Counts._fields
            )
        )

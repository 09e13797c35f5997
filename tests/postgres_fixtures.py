"""PostgreSQL for the tests: a fresh schema per test, owned by an ordinary role.

The machines here run PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). Tests connect
as `agentjournal_test`, a role that is neither superuser nor BYPASSRLS, so row-level security
applies to them as it would to an application. Each test gets its own schema, dropped afterwards.
Under CI (`CI=true`) an unreachable server fails the tests that need it; elsewhere they skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import psycopg
import pytest

ADMIN_URL = os.environ.get("AGENTJOURNAL_TEST_PG_ADMIN", "postgresql://127.0.0.1:5432/test")
ROLE = "agentjournal_test"
HOST = "127.0.0.1:5432/test"


@cache
def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used here, or None. Sets up the test role once per run."""
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
            if not exists:
                conn.execute(f"CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS")
            conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO {ROLE}")
    except psycopg.Error as exc:
        return f"PostgreSQL at {ADMIN_URL} is not usable: {exc}"
    return None


def require_postgres() -> None:
    problem = postgres_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{problem} (CI must run the PostgreSQL tests)")
    pytest.skip(problem)


def url_for(schema: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"postgresql://{ROLE}@{HOST}?{query}"


@contextmanager
def fresh_schema(prefix: str = "t") -> Iterator[str]:
    """A schema name no one uses; dropped with everything in it afterwards."""
    require_postgres()
    schema = f"aj_{prefix}_{secrets.token_hex(6)}"
    try:
        yield schema
    finally:
        drop_schema(schema)


def drop_schema(schema: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# psycopg_pool opens connections in a thread of its own and draws their lifetime's jitter from
# the global `random` module; Hypothesis sees the global state move while it draws an example and,
# the first time only, warns that a strategy used `random` (none of ours does). Under warnings as
# errors that was a FlakyFailure whenever the PostgreSQL pool grew mid-draw.
POOL_RANDOM = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)

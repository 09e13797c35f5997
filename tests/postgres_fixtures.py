"""PostgreSQL for the tests: a fresh schema per test, with the two roles a deployment has.

The machines here run PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). Two ordinary
roles, neither superuser nor BYPASSRLS, are created through `ADMIN_URL` (a superuser) as a
deployment would have them (docs/postgres.md, "Roles"): `OWNER` creates each test's schema and
migrates it (`Journal.migrate`, granting `ROLE`); the tests and their journals connect as `ROLE`,
which owns nothing and holds only the row privileges the application needs, so row-level security
binds them as it binds an application. Each test gets its own schema, dropped afterwards. Under CI
(`CI=true`) an unreachable server fails the tests that need it; elsewhere they skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import psycopg
import pytest
from psycopg import sql

from agentjournal import Journal

ADMIN_URL = os.environ.get("AGENTJOURNAL_TEST_PG_ADMIN", "postgresql://127.0.0.1:5432/test")
OWNER = "agentjournal_test_owner"  # creates and migrates the schemas: owns every table
ROLE = "agentjournal_test_app"  # what the journals connect as: owns nothing
HOST = "127.0.0.1:5432/test"
# Another run (another checkout) may create the roles at the same moment.
_CREATE_ROLE = """
DO $$ BEGIN
    CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$"""


OWNER_ID = sql.Identifier(OWNER)
ROLE_ID = sql.Identifier(ROLE)


@cache
def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used here, or None. Sets up the two roles once per run."""
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            for role in (OWNER, ROLE):
                conn.execute(sql.SQL(_CREATE_ROLE).format(sql.Identifier(role)))
            database = sql.Identifier(conn.info.dbname)
            conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(database, OWNER_ID))
            # The application role may create nothing: not a schema, not a table in public.
            conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(database, ROLE_ID))
            conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}").format(ROLE_ID))
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


def url_for(schema: str, *, role: str = ROLE, **options: str) -> str:
    """The URL of the journal in `schema`, as the application role (or `role`)."""
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"postgresql://{role}@{HOST}?{query}"


def owner_url_for(schema: str, **options: str) -> str:
    """The URL of the journal in `schema`, as the role that owns it and may migrate it."""
    return url_for(schema, role=OWNER, **options)


@contextmanager
def fresh_schema(prefix: str = "t", *, migrated: bool = True) -> Iterator[str]:
    """A schema name no one uses, created and migrated by the owner with the application role
    granted (`migrated=False`: not even created); dropped with everything in it afterwards."""
    require_postgres()
    schema = f"aj_{prefix}_{secrets.token_hex(6)}"
    try:
        if migrated:
            Journal.migrate(owner_url_for(schema), grant_to=[ROLE])
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

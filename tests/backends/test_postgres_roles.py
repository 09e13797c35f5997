"""Row-level security where it must hold: for the application role, which owns nothing.

Every PostgreSQL test connects as that role (postgres_fixtures.py: the owner role creates and
migrates each schema and grants it). Here: that it is such a role; that with the tenant filter
taken out of a query, run the way the application runs it, tenant A's read still sees nothing of
tenant B, in every table that has a tenant; that the role cannot switch isolation off; and the
deployment story around it (`migrate` as the owner, `MigrationRequired` for the application).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg import sql
from typer.testing import CliRunner

from agentjournal import InvalidArgument, Journal, MigrationRequired, StorageError, replicate
from agentjournal.backends import postgres
from agentjournal.backends.postgres import PostgresStorage
from agentjournal.backends.postgres_roles import PRIVILEGES
from agentjournal.cli import app
from agentjournal.keys import ApiKeys
from postgres_fixtures import ADMIN_URL, HOST, OWNER, ROLE, fresh_schema, owner_url_for, url_for

TENANTS = ("a", "b")


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema("roles") as name:
        yield name


@pytest.fixture
def new_schema() -> Iterator[str]:
    """Not created yet: for the tests of who may create and migrate it."""
    with fresh_schema("roles", migrated=False) as name:
        yield name


def connect(schema: str, role: str = ROLE) -> psycopg.Connection[Any]:
    conn = psycopg.connect(f"postgresql://{role}@{HOST}", autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def tenant_tables(conn: psycopg.Connection[Any]) -> list[str]:
    """Every table of the schema with a `tenant` column, from the catalog: a table a later
    migration adds is checked without anyone listing it here."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_attribute AS a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')"
        " AND a.attname = 'tenant' AND NOT a.attisdropped ORDER BY 1"
    ).fetchall()
    return [row[0] for row in rows]


def fill(journal: Journal) -> None:
    """Rows of both tenants in every table: sessions, events, the transcript, a tool call and
    its result, a task, an API key, search terms, a purge's audit row, and a replicated session
    (from a SQLite journal) with its progress."""
    for tenant in TENANTS:
        scoped = journal.for_tenant(tenant)
        sid = scoped.create_session(f"{tenant}'s").session_id
        scoped.append(sid, "user_message", {"content": f"secret of {tenant}"})
        scoped.append(sid, "tool_call", {"call_id": "c1", "name": "look", "arguments": "{}"})
        scoped.append(sid, "tool_result", {"call_id": "c1", "content": f"{tenant}'s result"})
        scoped.create_task(sid, "job", {"for": tenant})
        ApiKeys(journal.storage).create(tenant, label=tenant)
        scoped.purge_session(scoped.create_session("to purge").session_id)
        with tempfile.TemporaryDirectory() as folder, Journal.open(Path(folder, "e")) as edge:
            edge.create_session(f"{tenant}'s edge")
            replicate(edge, scoped)


def test_the_journal_connects_as_a_role_that_owns_nothing_and_bypasses_nothing(
    schema: str,
) -> None:
    with Journal.open(url_for(schema)) as journal:
        storage = journal.storage
        assert isinstance(storage, PostgresStorage)
        who = storage._read(
            None,
            "SELECT current_user, r.rolsuper, r.rolbypassrls,"
            " pg_has_role(current_user, n.nspowner, 'USAGE'),"
            " (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid"
            "  AND pg_has_role(current_user, relowner, 'USAGE'))"
            " FROM pg_roles AS r, pg_namespace AS n"
            " WHERE r.rolname = current_user AND n.nspname = current_schema()",
        )
    assert who == [(ROLE, False, False, False, 0)]


@pytest.mark.parametrize("pooler", ["session", "transaction"])
def test_without_its_tenant_filter_a_read_still_sees_only_its_tenant(
    schema: str, pooler: str
) -> None:
    """The application's own read path (`PostgresStorage._read`: the tenant scope set as every
    read sets it, on a pooled connection or in a pipelined transaction), given a query with no
    tenant filter at all, for every table that has a tenant: tenant A gets all of A's rows and
    none of B's. So does a raw connection of the application role that scopes itself the same way.
    """
    with Journal.open(url_for(schema, pooler=pooler)) as journal:
        fill(journal)
        storage = journal.storage
        assert isinstance(storage, PostgresStorage)
        with closing(connect(schema)) as raw:
            tables = tenant_tables(raw)
            assert {"sessions", "events", "messages", "search_index", "purge_audit"} <= set(tables)
            for tenant in TENANTS:
                for table in tables:
                    unfiltered = f"SELECT tenant FROM {table}"
                    # Interleaved, so the pooled connections switch tenants between reads.
                    for other in TENANTS:
                        assert {r[0] for r in storage._read(other, unfiltered)} == {other}, table
                    with raw.transaction():
                        raw.execute(postgres._SCOPE_LOCAL, (tenant,))
                        seen = {r[0] for r in raw.execute(unfiltered)}
                    assert seen == {tenant}, table
                    # Asking for the other tenant's rows by name finds none either.
                    for other in TENANTS:
                        asked = f"SELECT count(*) FROM {table} WHERE tenant = %s"
                        [(count,)] = storage._read(tenant, asked, (other,))
                        assert (count > 0) == (other == tenant), (tenant, other, table)
            for nobody in ("", "c"):
                for table in tables:
                    assert storage._read(nobody, f"SELECT * FROM {table}") == [], (nobody, table)
            for table in tables:  # and a connection that set no scope at all
                assert raw.execute(f"SELECT * FROM {table}").fetchall() == [], table
        # The application itself, through every tenant's verbs, is unchanged.
        assert [len(journal.for_tenant(t).sessions()) for t in TENANTS] == [2, 2]  # one replicated


def test_no_tenant_can_be_the_wildcard(schema: str) -> None:
    """'*' (every tenant) is the writer's scope and never a tenant's: no journal, view or key
    can be made for it, and an empty tenant sees nothing rather than everything."""
    with Journal.open(url_for(schema)) as journal:
        fill(journal)
        for wildcard in ("*", ""):
            with pytest.raises(InvalidArgument):
                Journal.open(url_for(schema), tenant=wildcard)
            with pytest.raises(InvalidArgument):
                journal.for_tenant(wildcard)
            with pytest.raises(InvalidArgument):
                ApiKeys(journal.storage).create(wildcard)
        assert journal.storage.session_ids("") == []


REFUSED = [
    "ALTER TABLE {t} DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY tenant_scope ON {t}",
    "CREATE POLICY everyone ON {t} USING (true)",
    "ALTER TABLE {t} DISABLE TRIGGER ALL",
    "ALTER TABLE {t} OWNER TO " + ROLE,
    "TRUNCATE {t}",
    "DROP TABLE {t} CASCADE",
    "UPDATE events SET payload = payload",
    "DELETE FROM purge_audit",
    "CREATE TABLE intruder (x int)",
    "CREATE FUNCTION intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "SET session_replication_role = replica",  # would skip every trigger
    f"SET ROLE {OWNER}",
    "ALTER ROLE CURRENT_USER BYPASSRLS",
]


def test_the_application_role_cannot_switch_isolation_off(schema: str) -> None:
    """Even under the writer's scope '*', which any code holding the role's connection can set
    (PostgreSQL cannot restrict a custom setting), the role cannot remove what confines it: no
    policy or trigger can be disabled or dropped, no table altered, truncated or taken over,
    no event changed, no role assumed; a DELETE of events outside a purge meets the trigger."""
    with Journal.open(url_for(schema)) as journal:
        fill(journal)
    with closing(connect(schema)) as conn:
        conn.execute(postgres._SCOPE_SESSION, ("*",))
        tables = tenant_tables(conn)
        statements = [s.format(t=t) for s in REFUSED for t in (tables if "{t}" in s else [""])]
        for statement in statements:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
            conn.execute("DELETE FROM events")
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            " AND relkind = 'r' AND relrowsecurity AND relforcerowsecurity"
        ).fetchall()
        assert sorted(row[0] for row in rows) == tables
        conn.execute(postgres._SCOPE_SESSION, ("a",))
        assert {row[0] for row in conn.execute("SELECT tenant FROM events")} == {"a"}


def test_every_table_has_a_grant_rule_and_the_role_gets_exactly_it(schema: str) -> None:
    with closing(connect(schema, OWNER)) as conn:
        rows = conn.execute(
            "SELECT c.relname, coalesce(string_agg(p.privilege_type, ',' ORDER BY"
            " p.privilege_type) FILTER (WHERE p.grantee = %s::regrole), '')"
            " FROM pg_class AS c LEFT JOIN LATERAL aclexplode(c.relacl) AS p ON true"
            " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"
            " GROUP BY c.relname",
            (ROLE,),
        ).fetchall()
    granted = {name: set(filter(None, privileges.split(","))) for name, privileges in rows}
    assert granted == {table: set(privileges) for table, privileges in PRIVILEGES.items()}


def test_grant_refuses_a_table_without_a_rule(schema: str) -> None:
    with closing(connect(schema, OWNER)) as conn:
        conn.execute("CREATE TABLE unruled (tenant text)")
    with pytest.raises(StorageError, match=re.escape("no grant rule for table(s) unruled")):
        Journal.migrate(owner_url_for(schema), grant_to=[ROLE])


def test_grant_refuses_a_role_that_would_not_be_confined(schema: str) -> None:
    with psycopg.connect(ADMIN_URL) as admin:
        superuser = admin.info.user
    for role, why in [
        (OWNER, "owns schema"),
        (superuser, "superuser or BYPASSRLS"),
        ("aj_no_such_role", "there is no PostgreSQL role"),
    ]:
        with pytest.raises(InvalidArgument, match=why):
            Journal.migrate(owner_url_for(schema), grant_to=[role])


def schema_exists(schema: str) -> bool:
    with psycopg.connect(ADMIN_URL) as admin:
        found = admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        return found.fetchone() is not None


def versions(schema: str) -> list[int]:
    with closing(connect(schema, OWNER)) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM agentjournal_schema ORDER BY 1")]


def test_the_application_role_creates_nothing_and_says_what_to_run(new_schema: str) -> None:
    command = f"agentjournal migrate --db <the owner's URL> --grant {ROLE}"
    with pytest.raises(MigrationRequired, match=re.escape(command)):
        Journal.open(url_for(new_schema))
    assert not schema_exists(new_schema)
    # Migrated, but not granted to it: the same error, the same advice.
    Journal.migrate(owner_url_for(new_schema))
    with pytest.raises(MigrationRequired, match="--grant"):
        Journal.open(url_for(new_schema))
    Journal.migrate(owner_url_for(new_schema), grant_to=[ROLE])
    with Journal.open(url_for(new_schema)) as journal:
        sid = journal.create_session("now").session_id
        assert journal.append(sid, "user_message", {"content": "hello"}).seq == 2


def test_an_upgrade_waits_for_the_owner_and_grants_what_it_adds(
    new_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema at version 1 (before search) granted to the application role; a newer
    agentjournal connecting as that role refuses to open it and changes nothing; the owner's
    `agentjournal migrate`, without --grant, brings it up and grants the new search table, and
    the application appends (which writes search terms) and searches."""
    every = postgres._migrations()
    monkeypatch.setattr(postgres, "_migrations", lambda: every[:1])
    Journal.migrate(owner_url_for(new_schema), grant_to=[ROLE])
    Journal.open(url_for(new_schema)).close()  # the application runs on version 1
    monkeypatch.setattr(postgres, "_migrations", lambda: every)
    with pytest.raises(MigrationRequired, match="agentjournal migrate"):
        Journal.open(url_for(new_schema))
    assert versions(new_schema) == [1]
    result = CliRunner().invoke(app, ["migrate", "--db", owner_url_for(new_schema)])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output
    assert versions(new_schema) == list(range(1, len(every) + 1))
    with Journal.open(url_for(new_schema)) as journal:
        sid = journal.create_session("after the upgrade").session_id
        journal.append(sid, "user_message", {"content": "findable words"})
        assert [hit.session_id for hit in journal.search("findable").hits] == [sid]


def test_migrate_on_sqlite_creates_the_file_and_has_nothing_to_grant(tmp_path: Any) -> None:
    path = tmp_path / "agent.db"
    with pytest.raises(InvalidArgument, match="roles are PostgreSQL's"):
        Journal.migrate(path, grant_to=["someone"])
    Journal.migrate(path)
    with Journal.open(path, create=False) as journal:
        assert journal.sessions() == []


def test_the_cli_names_the_command_and_runs_it(new_schema: str) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["sessions", "--db", url_for(new_schema)])
    assert refused.exit_code == 2
    assert "agentjournal migrate" in refused.output
    assert not schema_exists(new_schema)
    done = runner.invoke(
        app, ["migrate", "--db", owner_url_for(new_schema), "--grant", ROLE, "--json"]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"ok": True, "granted": [ROLE]}
    checked = runner.invoke(app, ["verify", "--db", url_for(new_schema)])
    assert checked.exit_code == 0, checked.output

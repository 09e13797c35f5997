"""Who may do what in a PostgreSQL journal (docs/postgres.md, "Roles").

Two roles. The *owner* creates the schema and runs the migrations (`agentjournal migrate`, or
the first `Journal.open` with its URL); it owns every table, so it could switch row-level
security off. The *application* role, the one `serve` and the library connect as, owns nothing:
it gets the row privileges below and nothing else, so it cannot alter a table, drop a policy,
disable a trigger, or UPDATE an event, and PostgreSQL applies every tenant policy to it.

The grants are kept here, in code run at migrate time, rather than in the migration files: a
migration that adds a table must add its rule here (granting refuses a table without one), and
every later migration re-grants the roles granted before, so an upgrade cannot leave the
application without a privilege it needs.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from psycopg import sql

from agentjournal.errors import InvalidArgument, StorageError

__all__ = ["PRIVILEGES", "grant", "granted_roles"]

# Each table of the schema -> what the application role may do to its rows. Nothing more: no
# TRUNCATE, REFERENCES or TRIGGER, and no DDL (that needs ownership, which it never has).
PRIVILEGES: Final[dict[str, tuple[str, ...]]] = {
    # Read at open to check the version; only the owner writes it.
    "agentjournal_schema": ("SELECT",),
    # DELETE: purge_session removes the session row with its events.
    "sessions": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    # Never UPDATE (append-only); DELETE only inside a purge, which a trigger checks.
    "events": ("SELECT", "INSERT", "DELETE"),
    # Projections: rebuilt by verify(rebuild=True) (DELETE, INSERT), purged with their session.
    "messages": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "tool_calls": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "tasks": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "search_index": ("SELECT", "INSERT", "DELETE"),
    # Revoking a key updates it; a key is never deleted (its id is never reused).
    "api_keys": ("SELECT", "INSERT", "UPDATE"),
    # A purge writes its row and then clears `pending`; a trigger keeps the rest permanent.
    "purge_audit": ("SELECT", "INSERT", "UPDATE"),
    # Always empty: only the foreign key of purge_audit.pending reads it (as the owner).
    "purge_guard": (),
    # The source id, made by the migration; read by a replicator reading this journal.
    "journal_meta": ("SELECT",),
    # A replicator writing into this journal keeps its place and its sessions' fates here.
    "replication_progress": ("SELECT", "INSERT", "UPDATE"),
    "session_sources": ("SELECT", "INSERT", "UPDATE"),
}


def grant(conn: psycopg.Connection[Any], role: str) -> None:
    """Give `role` exactly what the application needs in the connection's current schema, and
    take away anything else it was given on these tables. Run by the owner, in its transaction.
    Refuses a role that bypasses row-level security or owns the schema: granting to it would
    promise an isolation that PostgreSQL does not apply to it."""
    row = conn.execute(
        "SELECT r.rolsuper OR r.rolbypassrls, pg_has_role(r.oid, n.nspowner, 'USAGE'),"
        " n.nspname FROM pg_roles AS r, pg_namespace AS n"
        " WHERE r.rolname = %s AND n.oid = current_schema()::regnamespace",
        (role,),
    ).fetchone()
    if row is None:
        raise InvalidArgument(f"there is no PostgreSQL role {role!r} (CREATE ROLE it first)")
    bypasses, owns, schema = row
    if bypasses:
        raise InvalidArgument(
            f"role {role!r} is a superuser or BYPASSRLS: row-level security would not apply to"
            " it; the application role must be an ordinary one"
        )
    if owns:
        raise InvalidArgument(
            f"role {role!r} owns schema {schema!r} (or is a member of its owner): it could switch"
            " row-level security off; the application role must own nothing"
        )
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            " AND relkind IN ('r', 'p')"
        ).fetchall()
    }
    unknown = sorted(tables - PRIVILEGES.keys())
    if unknown:
        raise StorageError(
            f"no grant rule for table(s) {', '.join(unknown)}: add them to"
            " agentjournal.backends.postgres_roles.PRIVILEGES"
        )
    who = sql.Identifier(role)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), who))
    for table in sorted(tables):
        name = sql.Identifier(table)
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(name, who))
        if PRIVILEGES[table]:
            privileges = sql.SQL(", ").join(sql.SQL(p) for p in PRIVILEGES[table])
            conn.execute(sql.SQL("GRANT {} ON {} TO {}").format(privileges, name, who))


def granted_roles(conn: psycopg.Connection[Any]) -> list[str]:
    """The roles an earlier `grant` gave the application's privileges in the current schema
    (they can read its version table), for a migration to grant again what it adds."""
    rows = conn.execute(
        "SELECT DISTINCT pg_get_userbyid(a.grantee) FROM pg_class AS c, aclexplode(c.relacl) AS a"
        " WHERE c.relnamespace = current_schema()::regnamespace"
        " AND c.relname = 'agentjournal_schema' AND a.privilege_type = 'SELECT'"
        " AND a.grantee <> c.relowner AND a.grantee <> 0 ORDER BY 1"
    ).fetchall()
    return [row[0] for row in rows]

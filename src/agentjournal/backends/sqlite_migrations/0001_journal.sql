-- agentjournal schema for SQLite, version 1. Applied by `_migrate()` in sqlite.py inside one
-- transaction that also sets PRAGMA user_version; later versions append migrations, never edit this.

-- The sessions projection, and the anchor of tenancy: every event's session belongs to one tenant.
CREATE TABLE sessions (
    session_id        TEXT PRIMARY KEY,
    tenant            TEXT NOT NULL,
    title             TEXT NOT NULL DEFAULT '',
    status            TEXT NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'archived', 'deleted')),
    model             TEXT,
    system_prompt     TEXT,
    metadata          TEXT NOT NULL DEFAULT '{}',
    forked_from       TEXT,
    forked_at_seq     INTEGER,
    last_seq          INTEGER NOT NULL DEFAULT 0,
    last_event_id     INTEGER NOT NULL DEFAULT 0,
    event_count       INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    idempotency_key   TEXT,
    UNIQUE (tenant, idempotency_key)
);
-- sessions(): newest activity first, by position (never by a clock). Status is filtered on the
-- way; one index instead of two halves the index pages every append rewrites.
CREATE INDEX sessions_by_activity ON sessions (tenant, last_event_id DESC);

-- The journal. AUTOINCREMENT: an event_id is never reused, even after a purge.
CREATE TABLE events (
    event_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT NOT NULL,
    session_id      TEXT NOT NULL REFERENCES sessions (session_id),
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
-- Partial: most events carry no key, and they cost this index nothing.
CREATE UNIQUE INDEX events_idempotency ON events (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- events_all(after=position) for one tenant.
CREATE INDEX events_by_tenant ON events (tenant, event_id);

-- The session's counters follow each new event inside SQLite: no round trip from Python per
-- append (under group commit every statement is a GIL hand-off). verify() checks them.
CREATE TRIGGER events_advance_session AFTER INSERT ON events
BEGIN
    UPDATE sessions
       SET last_seq = NEW.seq, last_event_id = NEW.event_id,
           event_count = event_count + 1, updated_at = NEW.created_at
     WHERE session_id = NEW.session_id;
END;

-- Who purged what, when, and how much: never the content. `pending` is set only inside the purge
-- transaction: its deferred foreign key to a table that is always empty makes COMMIT fail unless
-- the purge cleared it, so a pending row can exist only in the transaction that wrote it.
CREATE TABLE purge_guard (id INTEGER PRIMARY KEY);
CREATE TABLE purge_audit (
    purge_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    purged_by   TEXT NOT NULL,
    purged_at   INTEGER NOT NULL,
    event_count INTEGER NOT NULL,
    pending     INTEGER REFERENCES purge_guard (id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX purge_audit_pending ON purge_audit (session_id) WHERE pending IS NOT NULL;

-- Append-only, enforced by the database: no UPDATE ever, DELETE only inside a purge.
CREATE TRIGGER events_are_append_only BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE is not allowed');
END;
CREATE TRIGGER events_delete_only_by_purge BEFORE DELETE ON events
WHEN NOT EXISTS (
    SELECT 1 FROM purge_audit WHERE session_id = OLD.session_id AND pending IS NOT NULL
)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE only through purge_session');
END;
-- The guard above is a foreign key, which SQLite enforces only where foreign_keys is on; so a
-- purge may only be opened by a connection that has it on (ours always do).
CREATE TRIGGER purge_needs_foreign_keys BEFORE INSERT ON purge_audit
WHEN NEW.pending IS NOT NULL AND (SELECT foreign_keys FROM pragma_foreign_keys) = 0
BEGIN
    SELECT RAISE(ABORT, 'purge_session needs PRAGMA foreign_keys = ON');
END;
CREATE TRIGGER purge_audit_is_permanent BEFORE DELETE ON purge_audit
BEGIN
    SELECT RAISE(ABORT, 'purge_audit rows are permanent');
END;
CREATE TRIGGER purge_audit_only_closes BEFORE UPDATE ON purge_audit
WHEN NEW.pending IS NOT NULL OR OLD.pending IS NULL
  OR NEW.purge_id IS NOT OLD.purge_id OR NEW.tenant IS NOT OLD.tenant
  OR NEW.session_id IS NOT OLD.session_id OR NEW.purged_by IS NOT OLD.purged_by
  OR NEW.purged_at IS NOT OLD.purged_at OR NEW.event_count IS NOT OLD.event_count
BEGIN
    SELECT RAISE(ABORT, 'purge_audit rows are permanent');
END;

-- The transcript: one row per original message, showing its newest correction.
CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    seq        INTEGER NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    edited_seq INTEGER,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE tool_calls (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    call_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    arguments  TEXT NOT NULL,
    call_seq   INTEGER NOT NULL,
    status     TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'error')),
    result     TEXT,
    result_seq INTEGER,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;
CREATE INDEX tool_calls_by_seq ON tool_calls (session_id, call_seq);

-- The newest compaction of a session, found without scanning its history.
CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'context_compacted';

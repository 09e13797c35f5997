-- Version 7: a session's identity is (session_id, tenant), not session_id alone. Ids are chosen
-- by callers (an Agents SDK session "user-42", a LangGraph thread "1"), so two tenants must be
-- able to hold the same id without either seeing, blocking or learning of the other's session.
--
-- Every table keyed by a session id gets the tenant into its key, and every foreign key names
-- both columns. SQLite changes neither a key nor a foreign key in place, so the five tables are
-- built anew under a _v7 name, filled, the old ones dropped (children before their parent: the
-- foreign keys are on), and the new ones renamed; RENAME rewrites the REFERENCES clauses and the
-- AUTOINCREMENT counter along. Event ids are copied as they were, and the counter is carried
-- over, so an id is still never reused (a purge may have left it above the largest id kept). A
-- DROP TABLE fires no DELETE trigger, so the journal's append-only guard stays whole throughout.
-- The session id comes first in every key: each per-session query filters on it, and it stays
-- the column a distributed database would shard by.

CREATE TABLE sessions_v7 (
    session_id        TEXT NOT NULL,
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
    turn_open         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, tenant),
    UNIQUE (tenant, idempotency_key)
);
INSERT INTO sessions_v7 (session_id, tenant, title, status, model, system_prompt, metadata,
                         forked_from, forked_at_seq, last_seq, last_event_id, event_count,
                         prompt_tokens, completion_tokens, created_at, updated_at,
                         idempotency_key, turn_open)
    SELECT session_id, tenant, title, status, model, system_prompt, metadata,
           forked_from, forked_at_seq, last_seq, last_event_id, event_count,
           prompt_tokens, completion_tokens, created_at, updated_at,
           idempotency_key, turn_open
      FROM sessions;

CREATE TABLE events_v7 (
    event_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (session_id, tenant, seq),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions_v7 (session_id, tenant)
);
INSERT INTO events_v7 (event_id, tenant, session_id, seq, type, payload, idempotency_key,
                       created_at)
    SELECT event_id, tenant, session_id, seq, type, payload, idempotency_key, created_at
      FROM events ORDER BY event_id;
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'events_v7', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events_v7');
UPDATE sqlite_sequence
   SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))
 WHERE name = 'events_v7';

CREATE TABLE messages_v7 (
    session_id TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    edited_seq INTEGER,
    -- The original's time once a correction is shown (NULL: the shown event's own).
    created_at INTEGER CHECK ((created_at IS NULL) = (edited_seq IS NULL)),
    -- The event holding the text shown: the newest correction's, else the original's.
    content_id INTEGER NOT NULL,
    PRIMARY KEY (session_id, tenant, seq),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions_v7 (session_id, tenant)
) WITHOUT ROWID;
INSERT INTO messages_v7 (session_id, tenant, seq, tokens, edited_seq, created_at, content_id)
    SELECT m.session_id, s.tenant, m.seq, m.tokens, m.edited_seq, m.created_at, m.content_id
      FROM messages AS m JOIN sessions AS s ON s.session_id = m.session_id;

CREATE TABLE tool_calls_v7 (
    session_id TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    call_seq   INTEGER NOT NULL,
    status     TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'error')),
    result_seq INTEGER,
    PRIMARY KEY (session_id, tenant, call_id),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions_v7 (session_id, tenant)
) WITHOUT ROWID;
INSERT INTO tool_calls_v7 (session_id, tenant, call_id, call_seq, status, result_seq)
    SELECT t.session_id, s.tenant, t.call_id, t.call_seq, t.status, t.result_seq
      FROM tool_calls AS t JOIN sessions AS s ON s.session_id = t.session_id;

CREATE TABLE tasks_v7 (
    task_id          TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    parent_task_id   TEXT REFERENCES tasks_v7 (task_id),
    type             TEXT NOT NULL,
    input            TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    progress         REAL NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 1),
    message          TEXT,
    output           TEXT NOT NULL DEFAULT 'null',
    error            TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_seconds    REAL,
    lease_expires_at INTEGER,
    created_seq      INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL)),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions_v7 (session_id, tenant)
);
-- Sub-tasks may sort before their parents: an immediate foreign key is checked at the end of
-- the statement, not row by row.
INSERT INTO tasks_v7 (task_id, tenant, session_id, parent_task_id, type, input, status,
                      progress, message, output, error, attempt, retry_count, max_retries, lease_owner, lease_seconds,
                      lease_expires_at, created_seq, created_at, updated_at)
    SELECT task_id, tenant, session_id, parent_task_id, type, input, status, progress, message,
           output, error, attempt, retry_count, max_retries, lease_owner, lease_seconds,
           lease_expires_at, created_seq, created_at, updated_at
      FROM tasks;

DROP TABLE tasks;
DROP TABLE tool_calls;
DROP TABLE messages;
DROP TABLE events;
DROP TABLE sessions;
ALTER TABLE sessions_v7 RENAME TO sessions;
ALTER TABLE events_v7 RENAME TO events;
ALTER TABLE messages_v7 RENAME TO messages;
ALTER TABLE tool_calls_v7 RENAME TO tool_calls;
ALTER TABLE tasks_v7 RENAME TO tasks;

CREATE INDEX sessions_by_activity ON sessions (tenant, last_event_id DESC);
CREATE INDEX sessions_turn_open ON sessions (tenant) WHERE turn_open = 1;
CREATE UNIQUE INDEX events_idempotency ON events (session_id, tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX events_by_tenant ON events (tenant, event_id);
CREATE INDEX events_compactions ON events (session_id, tenant, seq)
    WHERE type = 'context_compacted';
CREATE INDEX tool_calls_by_seq ON tool_calls (session_id, tenant, call_seq);
CREATE INDEX tool_calls_open ON tool_calls (session_id, tenant) WHERE status = 'pending';
CREATE INDEX tasks_pending ON tasks (tenant, type, task_id) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_by_session ON tasks (session_id, tenant, created_seq);
CREATE INDEX tasks_by_status ON tasks (tenant, status, task_id);
CREATE INDEX tasks_by_parent ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

-- The guards dropped with `events`, the same but for the purge they wait for, which now names
-- the tenant too.
CREATE TRIGGER events_are_append_only BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE is not allowed');
END;
CREATE TRIGGER events_delete_only_by_purge BEFORE DELETE ON events
WHEN NOT EXISTS (
    SELECT 1 FROM purge_audit
     WHERE session_id = OLD.session_id AND tenant = OLD.tenant AND pending IS NOT NULL
)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE only through purge_session');
END;

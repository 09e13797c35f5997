-- Version 3: the tasks projection, and what resume needs to find cut turns without a scan.

-- Durable work. Every change is a task_* event of the task's session; this row is their fold.
-- A sub-task lives in its parent's session, so a purge takes parent and children together.
CREATE TABLE tasks (
    task_id          TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    session_id       TEXT NOT NULL REFERENCES sessions (session_id),
    parent_task_id   TEXT REFERENCES tasks (task_id),
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
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);
-- claim_task: the oldest pending task of some types. Task ids start with their creation time,
-- so id order is queue order; the index holds only pending work, whatever the history.
CREATE INDEX tasks_pending ON tasks (tenant, type, task_id) WHERE status = 'pending';
-- recover() and claim_task's sweep: running tasks by lease expiry (again only open work).
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_by_session ON tasks (session_id, created_seq);
CREATE INDEX tasks_by_status ON tasks (tenant, status, task_id);
CREATE INDEX tasks_by_parent ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

-- A session whose last turn has not ended (see projection.TURN_EVENTS): resume finds them here.
ALTER TABLE sessions ADD COLUMN turn_open INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET turn_open = coalesce((
    SELECT e.type != 'assistant_message' FROM events AS e
     WHERE e.session_id = sessions.session_id
       AND e.type IN ('user_message', 'tool_call', 'tool_result', 'assistant_message')
       AND json_extract(e.payload, '$.supersedes') IS NULL
     ORDER BY e.seq DESC LIMIT 1
), 0);
CREATE INDEX sessions_turn_open ON sessions (tenant) WHERE turn_open = 1;
-- The calls of a cut turn that still wait for their result (resume reads only these).
CREATE INDEX tool_calls_open ON tool_calls (session_id) WHERE status = 'pending';

-- The counters, and now turn_open, follow each new event inside SQLite (no round trip per event).
DROP TRIGGER events_advance_session;
CREATE TRIGGER events_advance_session AFTER INSERT ON events
BEGIN
    UPDATE sessions
       SET last_seq = NEW.seq, last_event_id = NEW.event_id,
           event_count = event_count + 1, updated_at = NEW.created_at,
           turn_open = CASE
               WHEN NEW.type IN ('tool_call', 'tool_result') THEN 1
               WHEN NEW.type NOT IN ('user_message', 'assistant_message') THEN turn_open
               WHEN json_extract(NEW.payload, '$.supersedes') IS NOT NULL THEN turn_open
               ELSE NEW.type = 'user_message'
           END
     WHERE session_id = NEW.session_id;
END;

-- agentjournal schema for PostgreSQL, version 1 (the SQLite schema's versions 1-3 in one).
-- Applied by `_migrate()` in postgres.py in one transaction, under an advisory lock, so instances
-- starting together apply it once. Later versions add files; a released file is never edited.

-- The anchor of tenancy: every row below names its tenant, and (session_id, tenant) is the key
-- the other tables point at, so a row can never claim another tenant's session.
CREATE TABLE sessions (
    session_id        text PRIMARY KEY,
    tenant            text NOT NULL,
    title             text NOT NULL DEFAULT '',
    status            text NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'archived', 'deleted')),
    model             text,
    system_prompt     text,
    metadata          text NOT NULL DEFAULT '{}',
    forked_from       text,
    forked_at_seq     bigint,
    last_seq          bigint NOT NULL DEFAULT 0,
    -- The position of the newest event: (last_tx, last_event_id), see events.tx.
    last_tx           xid8 NOT NULL DEFAULT '0',
    last_event_id     bigint NOT NULL DEFAULT 0,
    event_count       bigint NOT NULL DEFAULT 0,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    created_at        bigint NOT NULL,
    updated_at        bigint NOT NULL,
    idempotency_key   text,
    turn_open         boolean NOT NULL DEFAULT false,
    UNIQUE (tenant, idempotency_key),
    UNIQUE (session_id, tenant)
);
CREATE INDEX sessions_by_activity ON sessions (tenant, last_tx DESC, last_event_id DESC);
CREATE INDEX sessions_turn_open ON sessions (tenant) WHERE turn_open;

-- The journal. `tx` orders the global feed: see docs/postgres.md. It is the writing
-- transaction's id, or the session's previous event's if that is greater, so a session's events
-- ascend in the feed as they do by seq. Readers take only events with tx below the oldest
-- transaction still running (pg_snapshot_xmin), which every later commit is at or above: a reader
-- resuming after a position can never miss an event that commits later.
CREATE TABLE events (
    event_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx              xid8 NOT NULL,
    tenant          text NOT NULL,
    session_id      text NOT NULL,
    seq             bigint NOT NULL CHECK (seq >= 1),
    type            text NOT NULL,
    payload         text NOT NULL,
    idempotency_key text,
    created_at      bigint NOT NULL,
    UNIQUE (session_id, seq),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant)
);
CREATE UNIQUE INDEX events_idempotency ON events (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX events_feed ON events (tenant, tx, event_id);
CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'context_compacted';

-- Each new event gets its tx from its session row, which it locks: two transactions appending to
-- one session take their turns here, and the second sees the first's last_tx.
CREATE FUNCTION events_take_tx() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    previous xid8;
BEGIN
    SELECT last_tx INTO previous FROM sessions
     WHERE session_id = NEW.session_id AND tenant = NEW.tenant FOR UPDATE;
    IF NOT FOUND THEN
        RAISE foreign_key_violation USING MESSAGE = format(
            'event for session %s of tenant %s, which does not exist', NEW.session_id, NEW.tenant);
    END IF;
    NEW.tx := greatest(pg_current_xact_id(), previous);
    RETURN NEW;
END $$;
CREATE TRIGGER events_take_tx BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_take_tx();

-- The sessions' counters follow their new events inside the database, once per statement and
-- session (not once per event: each UPDATE of an indexed column writes a new row version and an
-- entry in every index, and a batch of 100 events paid that 100 times).
CREATE FUNCTION events_advance_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sessions AS s
       SET last_seq = n.last_seq,
           last_tx = greatest(s.last_tx, n.last_tx),
           last_event_id = n.last_event_id,
           event_count = s.event_count + n.added,
           updated_at = n.updated_at,
           -- The newest turn event decides (see projection.TURN_EVENTS): open unless it is the
           -- assistant's reply; corrections (supersedes) do not count.
           turn_open = coalesce(n.turn_open, s.turn_open)
      FROM (
          SELECT e.session_id,
                 max(e.seq) AS last_seq,
                 max(e.tx) AS last_tx,
                 (array_agg(e.event_id ORDER BY e.seq DESC))[1] AS last_event_id,
                 count(*) AS added,
                 (array_agg(e.created_at ORDER BY e.seq DESC))[1] AS updated_at,
                 (array_agg(e.type <> 'assistant_message' ORDER BY e.seq DESC)
                     FILTER (WHERE e.type IN ('tool_call', 'tool_result')
                             OR (e.type IN ('user_message', 'assistant_message')
                                 AND NOT e.payload::jsonb ? 'supersedes')))[1] AS turn_open
            FROM new_events AS e
           GROUP BY e.session_id
      ) AS n
     WHERE s.session_id = n.session_id;
    RETURN NULL;
END $$;
CREATE TRIGGER events_advance_sessions AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_advance_sessions();

-- Who purged what, when, and how much: never the content. `pending` is set only inside the purge
-- transaction: its deferred foreign key to a table that is always empty makes COMMIT fail unless
-- the purge cleared it, so a pending row can exist only in the transaction that wrote it.
CREATE TABLE purge_guard (id integer PRIMARY KEY);
CREATE TABLE purge_audit (
    purge_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text NOT NULL,
    session_id  text NOT NULL,
    purged_by   text NOT NULL,
    purged_at   bigint NOT NULL,
    event_count bigint NOT NULL,
    pending     integer REFERENCES purge_guard (id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX purge_audit_pending ON purge_audit (session_id) WHERE pending IS NOT NULL;

-- Append-only, enforced by the database: no UPDATE, no TRUNCATE, DELETE only inside a purge.
CREATE FUNCTION events_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM purge_audit WHERE session_id = OLD.session_id AND pending IS NOT NULL
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: % is not allowed (DELETE only through purge_session)',
        TG_OP USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER events_are_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_are_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_append_only();

CREATE FUNCTION purge_audit_is_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.pending IS NOT NULL AND NEW.pending IS NULL
       AND (NEW.purge_id, NEW.tenant, NEW.session_id, NEW.purged_by, NEW.purged_at,
            NEW.event_count)
           IS NOT DISTINCT FROM (OLD.purge_id, OLD.tenant, OLD.session_id, OLD.purged_by,
                                 OLD.purged_at, OLD.event_count) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'purge_audit rows are permanent' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER purge_audit_is_permanent BEFORE UPDATE OR DELETE ON purge_audit
    FOR EACH ROW EXECUTE FUNCTION purge_audit_is_permanent();
CREATE TRIGGER purge_audit_no_truncate BEFORE TRUNCATE ON purge_audit
    FOR EACH STATEMENT EXECUTE FUNCTION purge_audit_is_permanent();

-- The transcript: one row per original message, showing its newest correction.
CREATE TABLE messages (
    session_id text NOT NULL,
    tenant     text NOT NULL,
    seq        bigint NOT NULL,
    role       text NOT NULL,
    content    text NOT NULL,
    tokens     bigint NOT NULL,
    edited_seq bigint,
    created_at bigint NOT NULL,
    PRIMARY KEY (session_id, seq),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant)
);

CREATE TABLE tool_calls (
    session_id text NOT NULL,
    tenant     text NOT NULL,
    call_id    text NOT NULL,
    name       text NOT NULL,
    arguments  text NOT NULL,
    call_seq   bigint NOT NULL,
    status     text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'error')),
    result     text,
    result_seq bigint,
    PRIMARY KEY (session_id, call_id),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant)
);
CREATE INDEX tool_calls_by_seq ON tool_calls (session_id, call_seq);
CREATE INDEX tool_calls_open ON tool_calls (session_id) WHERE status = 'pending';

-- Durable work. Every change is a task_* event of the task's session; this row is their fold.
CREATE TABLE tasks (
    task_id          text PRIMARY KEY,
    tenant           text NOT NULL,
    session_id       text NOT NULL,
    parent_task_id   text REFERENCES tasks (task_id),
    type             text NOT NULL,
    input            text NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    progress         double precision NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 1),
    message          text,
    output           text NOT NULL DEFAULT 'null',
    error            text,
    attempt          bigint NOT NULL DEFAULT 0,
    retry_count      bigint NOT NULL DEFAULT 0,
    max_retries      bigint NOT NULL,
    lease_owner      text,
    lease_seconds    double precision,
    lease_expires_at bigint,
    created_seq      bigint NOT NULL,
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL,
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL)),
    FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant)
);
CREATE INDEX tasks_pending ON tasks (tenant, type, task_id) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_by_session ON tasks (session_id, created_seq);
CREATE INDEX tasks_by_status ON tasks (tenant, status, task_id);
CREATE INDEX tasks_by_parent ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

-- API keys: only a hash of each secret; a revoked key stays, so its id is never reused.
CREATE TABLE api_keys (
    key_id      text PRIMARY KEY,
    tenant      text NOT NULL,
    secret_hash text NOT NULL,
    label       text NOT NULL DEFAULT '',
    created_at  bigint NOT NULL,
    revoked_at  bigint
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);

-- Tenant isolation in the database too. Each transaction of agentjournal says whose rows it may
-- see (SET LOCAL agentjournal.tenant): a tenant's reads see that tenant only, whatever their
-- WHERE clause; '*' is for the writer, whose rules check the tenant of every row they touch, and
-- for the few cross-tenant reads (recover, key look-up). Without the setting nothing is visible.
-- FORCE applies the policies to the tables' owner as well; superusers and BYPASSRLS roles are
-- exempt by PostgreSQL's design (agentjournal logs a warning when it connects as one).
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['sessions', 'events', 'messages', 'tool_calls', 'tasks',
                                'api_keys', 'purge_audit']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', name);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', name);
        EXECUTE format(
            'CREATE POLICY tenant_scope ON %I USING ('
            '    tenant = current_setting(''agentjournal.tenant'', true)'
            '    OR current_setting(''agentjournal.tenant'', true) = ''*'')', name);
    END LOOP;
END $$;

-- Version 5: a session's identity is (session_id, tenant), not session_id alone. Ids are chosen
-- by callers (an Agents SDK session "user-42", a LangGraph thread "1"), so two tenants must be
-- able to hold the same id without either seeing, blocking or learning of the other's session.
-- Every key and unique index that named a session id alone now names its tenant beside it. The
-- session id stays first in each, so a per-session query is still one index range, and it
-- stays the column a distributed PostgreSQL (Citus) would shard by.

-- The sessions' key: the (session_id, tenant) pair the other tables already point at becomes
-- the primary key; their foreign keys are dropped and made again against it.
ALTER TABLE messages DROP CONSTRAINT messages_session_id_tenant_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_session_id_tenant_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_session_id_tenant_fkey;
ALTER TABLE sessions DROP CONSTRAINT sessions_pkey;
ALTER TABLE sessions DROP CONSTRAINT sessions_session_id_tenant_key;
ALTER TABLE sessions ADD PRIMARY KEY (session_id, tenant);
ALTER TABLE messages
    ADD FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant);
ALTER TABLE tool_calls
    ADD FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant);
ALTER TABLE tasks
    ADD FOREIGN KEY (session_id, tenant) REFERENCES sessions (session_id, tenant);

-- Seqs and idempotency keys are unique within a session, which is now (session_id, tenant).
ALTER TABLE events DROP CONSTRAINT events_session_id_seq_key;
ALTER TABLE events ADD UNIQUE (session_id, tenant, seq);
DROP INDEX events_idempotency;
CREATE UNIQUE INDEX events_idempotency ON events (session_id, tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX events_compactions;
CREATE INDEX events_compactions ON events (session_id, tenant, seq)
    WHERE type = 'context_compacted';

ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages ADD PRIMARY KEY (session_id, tenant, seq);
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_pkey;
ALTER TABLE tool_calls ADD PRIMARY KEY (session_id, tenant, call_id);
DROP INDEX tool_calls_by_seq;
CREATE INDEX tool_calls_by_seq ON tool_calls (session_id, tenant, call_seq);
DROP INDEX tool_calls_open;
CREATE INDEX tool_calls_open ON tool_calls (session_id, tenant) WHERE status = 'pending';
DROP INDEX tasks_by_session;
CREATE INDEX tasks_by_session ON tasks (session_id, tenant, created_seq);
DROP INDEX search_index_by_session;
CREATE INDEX search_index_by_session ON search_index (session_id, tenant);
DROP INDEX purge_audit_pending;
CREATE INDEX purge_audit_pending ON purge_audit (session_id, tenant) WHERE pending IS NOT NULL;

-- A purge opens the way to its own session's events only, not to another tenant's of that id.
CREATE OR REPLACE FUNCTION events_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM purge_audit
         WHERE session_id = OLD.session_id AND tenant = OLD.tenant AND pending IS NOT NULL
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: % is not allowed (DELETE only through purge_session)',
        TG_OP USING ERRCODE = 'restrict_violation';
END $$;

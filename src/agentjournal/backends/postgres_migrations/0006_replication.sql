-- Version 6: replication (docs/replication.md). Three tables, and the commit order of purges.
--
-- journal_meta: facts about the database itself. 'source_id' names this journal as a source of
-- replication: random, made once here, never changed; a target tells its sources apart by it.
CREATE TABLE journal_meta (
    name  text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO journal_meta (name, value)
    VALUES ('source_id', 'src_' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 24));

-- On a target: how far each (source, source tenant) has been applied into a tenant here. Written
-- in the same transaction as the events it counts, so it can never be ahead of or behind them.
CREATE TABLE replication_progress (
    source_id       text NOT NULL,
    source_tenant   text NOT NULL,
    tenant          text NOT NULL,
    position        text NOT NULL DEFAULT '',
    purge_position  text NOT NULL DEFAULT '',
    events          bigint NOT NULL DEFAULT 0,
    updated_at      bigint NOT NULL,
    PRIMARY KEY (source_id, source_tenant, tenant)
);

-- On a target: every session a source brought (or tried to), and what became of it.
CREATE TABLE session_sources (
    session_id text NOT NULL,
    tenant     text NOT NULL,
    source_id  text NOT NULL,
    state      text NOT NULL CHECK (state IN ('ok', 'conflict', 'stopped', 'purged')),
    error      text,
    updated_at bigint NOT NULL,
    PRIMARY KEY (session_id, tenant, source_id)
);

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['replication_progress', 'session_sources']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', name);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', name);
        EXECUTE format(
            'CREATE POLICY tenant_scope ON %I USING ('
            '    tenant = current_setting(''agentjournal.tenant'', true)'
            '    OR current_setting(''agentjournal.tenant'', true) = ''*'')', name);
    END LOOP;
END $$;

-- A purge's place in commit order, as the events have theirs: the purges a replicator follows
-- are read as the feed is, only below the oldest transaction still running, so one committing
-- late is never skipped.
ALTER TABLE purge_audit ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX purge_audit_by_tx ON purge_audit (tenant, tx, purge_id);
CREATE OR REPLACE FUNCTION purge_audit_is_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.pending IS NOT NULL AND NEW.pending IS NULL
       AND (NEW.purge_id, NEW.tenant, NEW.session_id, NEW.purged_by, NEW.purged_at,
            NEW.event_count, NEW.tx)
           IS NOT DISTINCT FROM (OLD.purge_id, OLD.tenant, OLD.session_id, OLD.purged_by,
                                 OLD.purged_at, OLD.event_count, OLD.tx) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'purge_audit rows are permanent' USING ERRCODE = 'restrict_violation';
END $$;

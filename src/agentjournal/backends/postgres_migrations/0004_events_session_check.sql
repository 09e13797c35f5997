-- Version 4: the events' foreign key to their session becomes the statement trigger's check. The
-- rule is unchanged: an event belongs to an existing session of its own tenant, and a session
-- with events cannot be deleted or re-keyed. Since version 3, events_advance_sessions already
-- refuses (foreign_key_violation) a statement whose events name a missing session or another
-- tenant's, and it locks and updates every session it advances (so a concurrent DELETE of one
-- waits for the commit, and then finds the events or, under REPEATABLE READ, fails to
-- serialize). The foreign key repeated that check once per event; what it did on the sessions'
-- side, triggers on sessions do now.
--
-- The statement trigger finds each session by its id alone: with `tenant = n.tenant` beside it,
-- the planner could pick sessions_by_activity (tenant first) for a small or fresh table and keep
-- that plan, scanning every session of the tenant for each one advanced. The tenant is compared
-- with IS NOT DISTINCT FROM (the same here: both sides are NOT NULL), which no index serves.

ALTER TABLE events DROP CONSTRAINT events_session_id_tenant_fkey;

CREATE FUNCTION sessions_keep_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM events
                WHERE session_id = OLD.session_id AND tenant IS NOT DISTINCT FROM OLD.tenant) THEN
        RAISE foreign_key_violation USING MESSAGE = format(
            'session %s of tenant %s still has events', OLD.session_id, OLD.tenant);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sessions_keep_events_on_delete AFTER DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_keep_events();
CREATE TRIGGER sessions_keep_events_on_rekey AFTER UPDATE OF session_id, tenant ON sessions
    FOR EACH ROW WHEN (OLD.session_id IS DISTINCT FROM NEW.session_id
                       OR OLD.tenant IS DISTINCT FROM NEW.tenant)
    EXECUTE FUNCTION sessions_keep_events();

CREATE OR REPLACE FUNCTION events_advance_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    groups bigint;
    advanced bigint;
    culprit record;
BEGIN
    WITH n AS MATERIALIZED (
        SELECT e.session_id,
               e.tenant,
               min(e.tx) AS first_tx,
               max(e.tx) AS last_tx,
               max(e.seq) AS last_seq,
               (array_agg(e.event_id ORDER BY e.seq DESC))[1] AS last_event_id,
               count(*) AS added,
               (array_agg(e.created_at ORDER BY e.seq DESC))[1] AS updated_at,
               (array_agg(e.type <> 'assistant_message' ORDER BY e.seq DESC)
                   FILTER (WHERE e.type IN ('tool_call', 'tool_result')
                           OR (e.type IN ('user_message', 'assistant_message')
                               AND ((strpos(e.payload, 'supersedes') = 0
                                     AND strpos(e.payload, E'\\u') = 0)
                                    OR NOT e.payload::jsonb ? 'supersedes'))))[1] AS turn_open
          FROM new_events AS e
         GROUP BY e.session_id, e.tenant
    ), moved AS (
        UPDATE sessions AS s
           SET last_seq = n.last_seq,
               last_tx = greatest(s.last_tx, n.last_tx),
               last_event_id = n.last_event_id,
               event_count = s.event_count + n.added,
               updated_at = n.updated_at,
               turn_open = coalesce(n.turn_open, s.turn_open)
          FROM n
         WHERE s.session_id = n.session_id
           AND s.tenant IS NOT DISTINCT FROM n.tenant
           AND n.first_tx = n.last_tx
           AND n.last_tx = greatest(pg_current_xact_id(), s.last_tx)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM moved) INTO groups, advanced;
    IF advanced <> groups THEN
        SELECT n.session_id, n.tenant, s.session_id IS NOT NULL AS found INTO culprit
          FROM (SELECT DISTINCT session_id, tenant FROM new_events) AS n
          LEFT JOIN sessions AS s ON s.session_id = n.session_id AND s.tenant = n.tenant
         ORDER BY found
         LIMIT 1;
        IF NOT culprit.found THEN
            RAISE foreign_key_violation USING MESSAGE = format(
                'event for session %s of tenant %s, which does not exist',
                culprit.session_id, culprit.tenant);
        END IF;
        RAISE EXCEPTION 'events of one session must take tx greatest(pg_current_xact_id(),'
            ' the session''s last_tx), read under its row lock'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;

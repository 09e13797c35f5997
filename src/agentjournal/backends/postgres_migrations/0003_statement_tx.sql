-- Version 3: an event's tx is checked once per statement and session instead of looked up once
-- per row. The rule is unchanged: each new event's tx is greatest(the writing transaction's id,
-- its session's last_tx), read under the session's row lock. What changes is who computes it:
--
-- * agentjournal's writer has locked the session (`session_states`, FOR UPDATE) and read that
--   value with the lock, so it sends tx with each row;
-- * a row that comes without tx (another writer, a fork's copies, a session's first event) still
--   gets it from the row trigger, which now runs for those rows only (its WHEN is evaluated by the
--   server without calling the function);
-- * the statement trigger that advances the sessions checks every row's tx against the session
--   row it locks and updates, and refuses the statement if one differs or if a session is missing
--   or belongs to another tenant. A 100-event append paid 100 trigger calls and 100 look-ups of
--   one session row before; now it pays one join.
--
-- The newest turn event of a statement decides `turn_open`; corrections (a top-level key
-- "supersedes") do not count. The payload is parsed as JSON only where that key could be in it:
-- a JSON text that contains neither 'supersedes' nor an escape '\u' cannot have that key.

DROP TRIGGER events_take_tx ON events;
CREATE TRIGGER events_take_tx BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.tx IS NULL) EXECUTE FUNCTION events_take_tx();

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
           AND s.tenant = n.tenant
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

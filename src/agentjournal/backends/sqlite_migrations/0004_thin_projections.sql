-- Version 4: projections that point at the journal instead of copying its text, and the session
-- counters moved once per append instead of once per event.
--
-- A message's text and a tool call's arguments and result are in their events already. Copying
-- them into `messages` and `tool_calls` wrote every text twice: a third of the bytes of a turn,
-- and the pages of two b-trees whose ~600-byte rows split a page every few turns. The rows now
-- hold what only the fold knows (role, tokens, the newest correction, status) and where the text
-- is: a message names the event_id of the version it shows (the transcript is read most, and a
-- rowid is the cheapest look-up), a call the seqs of its two events.

CREATE TABLE messages_v4 (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    seq        INTEGER NOT NULL,
    role       TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    edited_seq INTEGER,
    created_at INTEGER NOT NULL,
    -- The event holding the text shown: the newest correction's, else the original's.
    content_id INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
INSERT INTO messages_v4 (session_id, seq, role, tokens, edited_seq, created_at, content_id)
    SELECT m.session_id, m.seq, m.role, m.tokens, m.edited_seq, m.created_at, e.event_id
      FROM messages AS m
      JOIN events AS e ON e.session_id = m.session_id AND e.seq = coalesce(m.edited_seq, m.seq);
DROP TABLE messages;
ALTER TABLE messages_v4 RENAME TO messages;

CREATE TABLE tool_calls_v4 (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    call_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    -- The tool_call event (arguments) and, once it arrived, the tool_result event (result).
    call_seq   INTEGER NOT NULL,
    status     TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'error')),
    result_seq INTEGER,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;
INSERT INTO tool_calls_v4 (session_id, call_id, name, call_seq, status, result_seq)
    SELECT session_id, call_id, name, call_seq, status, result_seq FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_v4 RENAME TO tool_calls;
CREATE INDEX tool_calls_by_seq ON tool_calls (session_id, call_seq);
CREATE INDEX tool_calls_open ON tool_calls (session_id) WHERE status = 'pending';

-- The trigger ran once per event: four UPDATEs of the session row (and of its activity and
-- turn_open index entries) for a four-event turn. The writer now sets the counters once per
-- append with the same values (SQLiteTx.insert_events); verify() checks them as before.
DROP TRIGGER events_advance_session;

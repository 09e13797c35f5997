-- Version 6: message and tool call rows keep only what their events do not say (0004 took
-- the texts out; these are the last copies).
--
-- A correction is an event of its original's type (rules.py), so the role is the type of the
-- event the row shows, and the row no longer copies it. The time of a message is its original
-- event's, which is the event shown until a correction arrives: `created_at` is kept only once
-- the row shows a correction, and is NULL before. Together a fifth of a `messages` row, read at
-- no extra cost: the shown event is read for its text anyway. A call's name is in its
-- tool_call event, read for the arguments already.
CREATE TABLE messages_v6 (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    seq        INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    edited_seq INTEGER,
    -- The original's time once a correction is shown (NULL: the shown event's own).
    created_at INTEGER CHECK ((created_at IS NULL) = (edited_seq IS NULL)),
    -- The event holding the text shown: the newest correction's, else the original's.
    content_id INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
INSERT INTO messages_v6 (session_id, seq, tokens, edited_seq, created_at, content_id)
    SELECT session_id, seq, tokens, edited_seq,
           CASE WHEN edited_seq IS NULL THEN NULL ELSE created_at END, content_id
      FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v6 RENAME TO messages;

ALTER TABLE tool_calls DROP COLUMN name;

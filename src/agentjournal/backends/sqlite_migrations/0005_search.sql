-- Version 5: full-text search. The FTS5 table itself (sqlite_search.CREATE) is created when the
-- file is opened by a SQLite that has FTS5, so that a build without it can still open and append
-- (search then raises SearchUnavailable). `indexed_upto`: every event up to this event_id is in
-- the index (sqlite_search.py: why the index follows the journal in batches); a database that
-- predates the index starts at 0 and catches up.
CREATE TABLE search_state (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_upto INTEGER NOT NULL
);
INSERT INTO search_state (id, indexed_upto) VALUES (1, 0);

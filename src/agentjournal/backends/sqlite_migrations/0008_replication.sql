-- Version 8: replication (docs/replication.md). Three tables, nothing existing changes.
--
-- journal_meta: facts about the database itself. 'source_id' names this journal as a source of
-- replication: random, made once here, never changed; a target tells its sources apart by it.
CREATE TABLE journal_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO journal_meta (name, value) VALUES ('source_id', 'src_' || lower(hex(randomblob(12))));

-- On a target: how far each (source, source tenant) has been applied into a tenant here. Written
-- in the same transaction as the events it counts, so it can never be ahead of or behind them.
CREATE TABLE replication_progress (
    source_id       TEXT NOT NULL,
    source_tenant   TEXT NOT NULL,
    tenant          TEXT NOT NULL,
    position        TEXT NOT NULL DEFAULT '',   -- the source feed's last position applied
    purge_position  TEXT NOT NULL DEFAULT '',   -- the source's last purge followed
    events          INTEGER NOT NULL DEFAULT 0, -- events applied so far
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (source_id, source_tenant, tenant)
);

-- On a target: every session a source brought (or tried to), and what became of it: 'ok'
-- (replicating), 'conflict' (the id was taken here by someone else: skipped), 'stopped' (this
-- target refused one of its events: skipped from then on), 'purged' (purged at the source and
-- here: never created again).
CREATE TABLE session_sources (
    session_id TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    source_id  TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('ok', 'conflict', 'stopped', 'purged')),
    error      TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, tenant, source_id)
);

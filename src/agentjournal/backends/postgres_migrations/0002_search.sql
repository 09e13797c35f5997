-- Version 2: full-text search. One row per event that has text to search (search_text.py decides
-- which, and turns Chinese and Japanese runs into bigrams, as on SQLite); written by the append's
-- own statement (postgres_write.py), so a committed event is searchable at once. The 'simple'
-- configuration: no stemming and no stop words, so both backends find the same words. Events
-- stored before this version are indexed by `agentjournal search --rebuild` (Journal.reindex_search).
CREATE TABLE search_index (
    event_id   bigint PRIMARY KEY,
    tenant     text NOT NULL,
    session_id text NOT NULL,
    terms      tsvector NOT NULL
);
CREATE INDEX search_index_terms ON search_index USING gin (terms);
CREATE INDEX search_index_by_session ON search_index (session_id);

ALTER TABLE search_index ENABLE ROW LEVEL SECURITY;
ALTER TABLE search_index FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON search_index USING (
    tenant = current_setting('agentjournal.tenant', true)
    OR current_setting('agentjournal.tenant', true) = '*');

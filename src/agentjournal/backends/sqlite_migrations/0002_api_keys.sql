-- API keys for the HTTP service. Only a hash of each key's secret is kept; the key id is public
-- (it is part of the key) and finds the row. A revoked key stays, so its id is never reused.
CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);

"""API keys: shown once, stored as a hash, checked in constant time, revocable, per tenant."""

from __future__ import annotations

from contextlib import closing

import pytest

from agentjournal import InvalidArgument, Journal
from agentjournal.keys import KEY_PREFIX, ApiKeys
from helpers.raw_sql import RawSQL


def test_a_key_authenticates_its_tenant_and_nothing_else(journal: Journal) -> None:
    keys = ApiKeys(journal.storage)
    acme, acme_key = keys.create("acme", "ci")
    _, other_key = keys.create("other")
    assert acme_key.startswith(KEY_PREFIX)
    assert keys.tenant_of(acme_key) == "acme"
    assert keys.tenant_of(other_key) == "other"
    wrong_secret = acme_key[:-1] + ("A" if acme_key[-1] != "A" else "B")
    for bad in (wrong_secret, acme_key + "x", "", "Bearer " + acme_key, acme.key_id):
        assert keys.tenant_of(bad) is None


def test_only_a_hash_of_the_secret_is_stored(
    journal: Journal, backend: str, journal_url: str
) -> None:
    _, key = ApiKeys(journal.storage).create("acme")
    # aj_<id>_<secret>: the secret itself may hold "_" (URL-safe base64), the id never does.
    secret = key.split("_", 2)[2]
    assert len(secret) == 43
    with closing(RawSQL(backend, journal_url)) as raw:
        stored = raw.execute("SELECT * FROM api_keys").fetchall()
    assert len(stored) == 1
    assert all(secret not in str(value) for value in stored[0])


def test_revoked_keys_stop_working_and_stay_listed(journal: Journal) -> None:
    keys = ApiKeys(journal.storage)
    row, key = keys.create("acme")
    assert keys.any_active()
    assert keys.revoke(row.key_id)
    assert not keys.revoke(row.key_id)
    assert not keys.revoke("nosuchkey0")
    assert keys.tenant_of(key) is None
    assert not keys.any_active()
    [listed] = keys.list("acme")
    assert listed.key_id == row.key_id
    assert listed.revoked_at is not None
    assert keys.list("other") == []


def test_a_bad_tenant_is_refused(journal: Journal) -> None:
    with pytest.raises(InvalidArgument):
        ApiKeys(journal.storage).create("bad tenant")

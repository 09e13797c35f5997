"""API keys for the HTTP service: each key belongs to one tenant.

A key reads `aj_<key id>_<secret>`. Only the SHA-256 of the secret is stored: the secret is 32
random bytes, so a slow password hash would add nothing but latency. Checking a key finds its row
by id and compares hashes in constant time. A key is shown once, when it is created.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from pathlib import Path

from agentjournal.arguments import check_id
from agentjournal.backends import ApiKeyRow, Storage, peek

__all__ = ["KEY_PREFIX", "ApiKeys", "active_keys_exist", "key_id_of"]

KEY_PREFIX = "aj_"
_KEY = re.compile(r"^aj_([a-z2-7]{10})_([A-Za-z0-9_-]{43})$")


def key_id_of(key: str) -> str:
    """The public id part of a well-formed key (what logs and limits may name)."""
    match = _KEY.match(key)
    return match.group(1) if match else ""


def active_keys_exist(url: str | Path) -> bool:
    """Whether the database at `url` holds an unrevoked key, read without opening it as a
    journal: nothing is created or migrated (False for a database that does not exist yet)."""
    return peek.active_keys_exist(url)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


class ApiKeys:
    """Create, check, list and revoke the keys stored beside the journal."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def create(self, tenant: str, label: str = "") -> tuple[ApiKeyRow, str]:
        """A new key for `tenant`: its stored row and the key itself (shown only now)."""
        check_id(tenant, "tenant")  # the rule every journal verb applies to a tenant
        key_id = base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()[:10]
        secret = secrets.token_urlsafe(32)
        row = ApiKeyRow(key_id, tenant, _hash(secret), label, time.time_ns() // 1_000_000)
        self._storage.write(lambda tx: tx.insert_api_key(row))
        return row, f"{KEY_PREFIX}{key_id}_{secret}"

    def tenant_of(self, key: str) -> str | None:
        """The tenant a valid, unrevoked key belongs to; None for anything else."""
        match = _KEY.match(key)
        if match is None:
            return None
        row = self._storage.api_key(match.group(1))
        if row is None or row.revoked_at is not None:
            return None
        if not hmac.compare_digest(row.secret_hash, _hash(match.group(2))):
            return None
        return row.tenant

    def list(self, tenant: str | None = None) -> list[ApiKeyRow]:
        return self._storage.api_keys(tenant)

    def revoke(self, key_id: str) -> bool:
        at = time.time_ns() // 1_000_000
        return self._storage.write(lambda tx: tx.revoke_api_key(key_id, at))

    def any_active(self) -> bool:
        return any(row.revoked_at is None for row in self._storage.api_keys(None))

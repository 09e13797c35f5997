"""/mcp of a real `agentjournal serve` (keys for tenants acme and beta) on loopback, driven by the
SDK's streamable HTTP client, on SQLite and PostgreSQL: the recall checks with acme's key, nothing
of acme's with beta's, no key refused, writes only with --mcp write, and a subscription told of an
event the library appends over another connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp_checks import check_isolation, check_recall, check_refusals, seed

from agentjournal import Journal
from mcp import Client
from postgres_fixtures import fresh_schema, url_for
from server.conftest import RunningServer, create_keys, launch


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def keyed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, str]]:
    """A keyed server with acme's refund session (its id) and beta's secret."""
    logs = tmp_path_factory.mktemp("mcp-http")
    with fresh_schema("mcp") if request.param == "postgres" else _no_schema() as schema:
        db: Path | str = logs / "journal.db" if schema is None else url_for(schema)
        with Journal.open(db) as journal:
            sid = seed(journal)
        running = launch(db, keys=create_keys(db, ("acme", "beta")), log_dir=logs)
        try:
            yield running, sid
        finally:
            running.stop()


class _no_schema:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@contextlib.asynccontextmanager
async def client(
    running: RunningServer, tenant: str | None, **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client on /mcp, sending `tenant`'s key (the HTTP client is ours to close)."""
    async with httpx.AsyncClient(headers=running.headers(tenant), timeout=30.0) as http:
        transport = streamable_http_client(f"{running.base_url}/mcp", http_client=http)
        async with Client(transport, **options) as connected:
            yield connected


def test_recall_with_a_key(keyed: tuple[RunningServer, str]) -> None:
    running, sid = keyed

    async def run() -> None:
        async with client(running, "acme") as acme:
            await check_recall(acme, sid)
            await check_refusals(acme, sid)
        async with client(running, "acme", mode="legacy") as acme:  # a 2025-era client
            await check_recall(acme, sid)

    asyncio.run(run())


def test_another_tenants_key_sees_nothing(keyed: tuple[RunningServer, str]) -> None:
    running, sid = keyed

    async def run() -> None:
        async with client(running, "beta") as beta:
            await check_isolation(beta, sid)

    asyncio.run(run())


def test_no_key_no_access(keyed: tuple[RunningServer, str]) -> None:
    running, _ = keyed
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer aj_nope_nope"}):
        answer = httpx.post(f"{running.base_url}/mcp", json=initialize, headers=headers)
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["www-authenticate"] == "Bearer"


def test_a_listener_hears_of_a_new_event(keyed: tuple[RunningServer, str]) -> None:
    running, sid = keyed
    uri = f"agentjournal://sessions/{sid}"

    async def run() -> None:
        async with (
            client(running, "acme") as acme,
            acme.listen(resource_subscriptions=[uri]) as updates,
        ):
            with Journal.open(running.db_path, tenant="acme") as other:
                other.append(sid, "user_message", {"content": "and 4712?"})
            event: Any = await anext(aiter(updates))
            assert event.uri == uri

    asyncio.run(run())


def test_writes_only_when_served_with_them(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    running = launch(db, "--mcp", "write", keys=create_keys(db, ("acme",)))
    try:

        async def run() -> None:
            async with client(running, "acme") as acme:
                made = await acme.call_tool("create_session", {"title": "over http"})
                assert not made.is_error

        asyncio.run(run())
    finally:
        running.stop()
    with Journal.open(db, tenant="acme") as journal:
        assert [s.title for s in journal.sessions()] == ["over http"]


def test_an_mcp_session_is_only_its_tenants(keyed: tuple[RunningServer, str]) -> None:
    # Another tenant's key with acme's session id must not post into that session, nor open its
    # stream, where acme's subscriptions are notified (with acme's session ids).
    running, _ = keyed
    url = f"{running.base_url}/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    opened = httpx.post(url, json=hello, headers={**accept, **running.headers("acme")})
    assert opened.status_code == 200
    session = {
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    as_beta = {**accept, **session, **running.headers("beta")}
    assert httpx.post(url, json=listing, headers=as_beta).status_code == 404
    with httpx.stream("GET", url, headers=as_beta, timeout=10.0) as stream:
        assert stream.status_code == 404
    as_acme = {**accept, **session, **running.headers("acme")}
    assert httpx.post(url, json=listing, headers=as_acme).status_code == 200
    assert httpx.delete(url, headers=as_acme).status_code == 200

"""A central journal served over HTTP names the source of every session replication brought
(`source_id` on the session list, a session, and search hits), within the caller's tenant only;
a session written there directly names none. On both backends, over a real keyed server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal import Journal, replicate
from server.conftest import RunningServer, StartServer

A, B = "acme", "beta"


@pytest.fixture(scope="module")
def central(server_db: Path | str, start_server: StartServer) -> RunningServer:
    return start_server(tenants=(A, B), db_path=server_db)


def get(server: RunningServer, tenant: str, path: str, **params: Any) -> Any:
    response = httpx.get(
        f"{server.base_url}{path}", params=params, headers=server.headers(tenant), timeout=10.0
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_sessions_and_search_hits_name_their_source_in_their_tenant_only(
    central: RunningServer, tmp_path: Path
) -> None:
    with Journal.open(tmp_path / "laptop.db") as laptop:
        edge = laptop.create_session("from the laptop").session_id
        laptop.append(edge, "user_message", {"content": "the kestrel landed"})
        source_id = laptop.source_id()
        replicate(laptop, central.db_path, tenant=A)
    with Journal.open(central.db_path, tenant=A) as journal:
        local = journal.create_session("written centrally").session_id
        journal.append(local, "user_message", {"content": "another kestrel"})

    page = get(central, A, "/v1/sessions")
    sources = {s["session_id"]: s["source_id"] for s in page["sessions"]}
    assert sources == {edge: source_id, local: None}
    assert get(central, A, f"/v1/sessions/{edge}")["source_id"] == source_id
    assert get(central, A, f"/v1/sessions/{local}")["source_id"] is None

    hits = get(central, A, "/v1/search", q="kestrel")["hits"]
    assert {h["session_id"]: h["source_id"] for h in hits} == {edge: source_id, local: None}

    # Another tenant sees neither the sessions nor where they came from.
    assert get(central, B, "/v1/sessions")["sessions"] == []
    assert get(central, B, "/v1/search", q="kestrel")["hits"] == []

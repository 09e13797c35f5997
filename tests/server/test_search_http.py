"""`GET /v1/search` over a real server, on both backends: hits as JSON, pages, and every hostile
query answered with a result or a problem+json 4xx, never a 500."""

from __future__ import annotations

import secrets

import httpx
import pytest
from http_checks import assert_problem

HOSTILE = [
    '"',
    "'",
    "(",
    ")",
    "*",
    "NEAR(a b)",
    "a AND",
    "OR NOT",
    "col:word",
    "{content}:x",
    "^x",
    "x\\",
    "%",
    "'; DROP TABLE events; --",
    "🙂",
    "订",
    "x" * 10_000,
    "",
    " ",
    "\u3000",
]


def test_a_search_finds_a_message_with_its_session_seq_and_marked_snippet(
    client: httpx.Client,
) -> None:
    word = f"kestrel{secrets.token_hex(3)}"
    session = client.post("/v1/sessions", json={"title": "Birds"}).json()
    sid = session["session_id"]
    reply = client.post(
        f"/v1/sessions/{sid}/events",
        json={"type": "user_message", "payload": {"content": f"I saw a {word} today"}},
    )
    assert reply.status_code == 201
    page = client.get("/v1/search", params={"q": word.upper()}).json()
    (hit,) = page["hits"]
    assert (hit["session_id"], hit["seq"], hit["type"], hit["session_title"]) == (
        sid,
        2,
        "user_message",
        "Birds",
    )
    ((start, end),) = hit["highlights"]
    assert hit["snippet"][start:end] == word
    assert page["next_cursor"] is None


def test_pages_follow_next_cursor(client: httpx.Client) -> None:
    word = f"plover{secrets.token_hex(3)}"
    sid = client.post("/v1/sessions", json={"title": "p"}).json()["session_id"]
    events = [{"type": "user_message", "payload": {"content": f"{word} {n}"}} for n in range(7)]
    assert client.post(f"/v1/sessions/{sid}/events", json={"events": events}).status_code == 201
    seqs: list[int] = []
    params: dict[str, object] = {"q": word, "limit": 3}
    while True:
        page = client.get("/v1/search", params=params).json()
        seqs += [hit["seq"] for hit in page["hits"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert sorted(seqs) == list(range(2, 9))


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_answer_a_page_or_a_422(client: httpx.Client, query: str) -> None:
    reply = client.get("/v1/search", params={"q": query})
    if reply.status_code == 200:
        assert set(reply.json()) == {"hits", "next_cursor"}
    else:
        assert "query" in assert_problem(reply, 422)["detail"]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": "x", "limit": 0},
        {"q": "x", "limit": 101},
        {"q": "x", "cursor": "bogus"},
        {"q": "x", "since": -1},
        {"q": "x", "session_status": "gone"},
        {"q": "x", "type": "nope"},
    ],
)
def test_bad_parameters_are_422(client: httpx.Client, params: dict[str, object]) -> None:
    assert_problem(client.get("/v1/search", params=params), 422)

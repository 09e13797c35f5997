"""What the MCP tests share: a journal with one tenant's refund conversation (tool call included)
and another tenant's secret, and the checks every transport must pass, driven by the official MCP
Python SDK's `Client`."""

from __future__ import annotations

from typing import Any

from agentjournal import Journal, NewEvent
from mcp import Client

SECRET = "zebra launch code"


def seed(journal: Journal) -> str:
    """Tenant acme's refund session (its id is returned) and tenant beta's secret."""
    acme = journal.for_tenant("acme")
    sid = acme.create_session("Refund for order 4711", system_prompt="Be brief.").session_id
    acme.append(sid, "user_message", {"content": "Please refund order 4711, it never arrived"})
    acme.append_many(
        sid,
        [
            NewEvent(
                "tool_call", {"call_id": "c1", "name": "refund", "arguments": '{"order": 4711}'}
            ),
            NewEvent("tool_result", {"call_id": "c1", "content": "refunded 30 EUR"}),
            NewEvent("assistant_message", {"content": "Order 4711 is refunded: 30 EUR."}),
        ],
    )
    beta = journal.for_tenant("beta")
    beta.append(beta.create_session("beta plans").session_id, "user_message", {"content": SECRET})
    return sid


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def check_recall(client: Client, sid: str) -> None:
    """Every read tool, the resources and the prompt, as tenant acme sees them."""
    names = [tool.name for tool in (await client.list_tools()).tools]
    assert names == ["search", "list_sessions", "read_session", "tool_calls", "replay", "fork"]

    found = await client.call_tool("search", {"query": "refund 4711", "limit": 5})
    assert not found.is_error, text(found)
    hits = found.structured_content["hits"]
    assert sid in {hit["session_id"] for hit in hits}  # (and forks of it, made below)
    assert any(hit["type"] == "user_message" for hit in hits)

    listed = await client.call_tool("list_sessions", {"search": "order 47"})
    assert [s["session_id"] for s in listed.structured_content["sessions"]] == [sid]

    window = await client.call_tool("read_session", {"session_id": sid, "last": 2})
    assert [e["seq"] for e in window.structured_content["events"]] == [4, 5]
    assert window.structured_content["total"] == 5
    assert window.structured_content["truncated"] is True
    assert window.structured_content["older_before"] == 4
    around = await client.call_tool("read_session", {"session_id": sid, "around": 3, "limit": 3})
    assert [e["seq"] for e in around.structured_content["events"]] == [2, 3, 4]

    calls = await client.call_tool("tool_calls", {"session_id": sid})
    (call,) = calls.structured_content["calls"]
    assert (call["name"], call["status"], call["result"]) == ("refund", "ok", "refunded 30 EUR")

    replayed = await client.call_tool("replay", {"session_id": sid, "format": "anthropic"})
    assert replayed.structured_content["system"] == "Be brief."
    assert replayed.structured_content["messages"][-1]["role"] == "assistant"

    forked = await client.call_tool("fork", {"session_id": sid, "at_seq": 2, "title": "retry"})
    assert forked.structured_content["forked_from"] == sid

    resources = (await client.list_resources()).resources
    assert f"agentjournal://sessions/{sid}" in [r.uri for r in resources]
    as_text = (await client.read_resource(f"agentjournal://sessions/{sid}")).contents[0]
    assert as_text.mime_type == "text/markdown"
    assert "**tool call** refund" in as_text.text
    assert "Order 4711 is refunded" in as_text.text
    as_json = (await client.read_resource(f"agentjournal://sessions/{sid}/json")).contents[0]
    assert as_json.mime_type == "application/json"
    assert '"refunded 30 EUR"' in as_json.text

    prompt = await client.get_prompt("continue_session", {"session_id": sid})
    spoken = [(m.role, m.content.text) for m in prompt.messages]
    assert ("user", "Please refund order 4711, it never arrived") in spoken
    assert ("assistant", "Order 4711 is refunded: 30 EUR.") in spoken


async def check_refusals(client: Client, sid: str) -> None:
    """Hostile or mistaken arguments are tool errors with the journal's words, never a crash;
    writing tools are refused on a read-only server."""
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("search", {"query": 5}, "query: Input should be a valid string"),
        ("search", {"query": "x" * 1_000_000}, "query: String should have at most 500"),
        ("search", {"query": "refund", "limit": "10"}, "limit: Input should be a valid integer"),
        ("search", {"query": "refund", "cursor": "1.2; DROP TABLE events"}, "is not one that"),
        ("search", {"query": '" OR 1=1 --', "types": ["x"]}, "unknown event type"),
        ("search", {"query": "refund", "bogus": 1}, "bogus: Extra inputs are not permitted"),
        ("read_session", {"session_id": "nope"}, "session 'nope' not found"),
        ("read_session", {"session_id": "../etc"}, "session_id must be"),
        ("read_session", {"session_id": sid, "last": 2, "around": 3}, "give last"),
        ("read_session", {"session_id": sid, "last": 10**9}, "last: Input should be less"),
        ("replay", {"session_id": sid, "format": "xml"}, "format: Input should be"),
        ("fork", {"session_id": sid, "at_seq": 99}, "at_seq"),
        ("no_such_tool", {}, "no tool named 'no_such_tool'"),
        ("create_session", {"title": "x"}, "started read-only"),
        ("append_note", {"session_id": sid, "text": "x"}, "started read-only"),
    ]
    for name, arguments, expected in cases:
        result = await client.call_tool(name, arguments)
        assert result.is_error, (name, arguments)
        assert expected in text(result), (name, text(result))
    # Still serving after all that.
    assert not (await client.call_tool("list_sessions", {})).is_error


async def check_isolation(client: Client, acme_sid: str) -> None:
    """As tenant beta: nothing of acme's, and acme's session answered as a missing one is."""
    found = await client.call_tool("search", {"query": "refund"})
    assert found.structured_content["hits"] == []
    own = await client.call_tool("search", {"query": "zebra"})
    assert [h["session_title"] for h in own.structured_content["hits"]] == ["beta plans"]
    listed = await client.call_tool("list_sessions", {})
    assert [s["title"] for s in listed.structured_content["sessions"]] == ["beta plans"]
    for tool in ("read_session", "tool_calls", "replay", "fork"):
        theirs = await client.call_tool(tool, {"session_id": acme_sid})
        missing = await client.call_tool(tool, {"session_id": "sess_missing"})
        assert theirs.is_error
        assert missing.is_error
        assert text(theirs) == text(missing).replace("sess_missing", acme_sid)
    uris = [r.uri for r in (await client.list_resources()).resources]
    assert f"agentjournal://sessions/{acme_sid}" not in uris

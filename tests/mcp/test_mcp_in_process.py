"""The MCP server in-process (the SDK's `Client` on the server object), on every backend: every
tool, resource and prompt; refusals; writes; tenants; a subscription told of a new event."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from mcp_checks import check_isolation, check_recall, check_refusals, seed, text

from agentjournal import Journal
from agentjournal.aio import AsyncJournal
from agentjournal.mcp import build_server
from mcp import Client, MCPError


def served(
    journal: Journal, tenant: str, check: Callable[[Client], Awaitable[None]], writes: bool = False
) -> None:
    scoped = AsyncJournal(journal.for_tenant(tenant))
    server, recall = build_server(lambda ctx: scoped, allow_writes=writes)

    async def run() -> None:
        try:
            async with Client(server) as client:
                await check(client)
        finally:
            await recall.close()

    asyncio.run(run())


def test_every_tool_resource_and_prompt(journal: Journal) -> None:
    sid = seed(journal)
    served(journal, "acme", lambda client: check_recall(client, sid))


def test_bad_arguments_are_tool_errors(journal: Journal) -> None:
    sid = seed(journal)
    served(journal, "acme", lambda client: check_refusals(client, sid))


def test_another_tenant_sees_nothing(journal: Journal) -> None:
    sid = seed(journal)
    served(journal, "beta", lambda client: check_isolation(client, sid))


def test_writing_tools_only_when_allowed(journal: Journal) -> None:
    async def check(client: Client) -> None:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"create_session", "append_message", "append_note"} <= names
        made = await client.call_tool("create_session", {"title": "notes"})
        sid = made.structured_content["session_id"]
        said = await client.call_tool(
            "append_message", {"session_id": sid, "role": "user", "content": "hello"}
        )
        assert said.structured_content["seq"] == 2
        noted = await client.call_tool("append_note", {"session_id": sid, "text": "ostrich"})
        assert not noted.is_error, text(noted)
        found = await client.call_tool("search", {"query": "ostrich"})
        assert [h["seq"] for h in found.structured_content["hits"]] == [3]
        assert not any("delete" in name or "purge" in name for name in names)

    served(journal, "acme", check, writes=True)
    assert [s.title for s in journal.for_tenant("acme").sessions()] == ["notes"]


def test_a_listener_hears_of_a_new_event(journal: Journal) -> None:
    sid = seed(journal)
    uri = f"agentjournal://sessions/{sid}"

    async def check(client: Client) -> None:
        async with client.listen(resource_subscriptions=[uri]) as updates:
            # Another connection to the journal (the library) appends.
            await asyncio.to_thread(
                journal.for_tenant("acme").append, sid, "user_message", {"content": "and 4712?"}
            )
            event: Any = await anext(aiter(updates))
            assert event.uri == uri
        reread = await client.read_resource(uri)
        assert "and 4712?" in reread.contents[0].text

    served(journal, "acme", check)


def test_a_listener_cannot_follow_another_tenants_session(journal: Journal) -> None:
    sid = seed(journal)

    async def check(client: Client) -> None:
        with pytest.raises(MCPError, match=f"session '{sid}' not found"):
            async with client.listen(resource_subscriptions=[f"agentjournal://sessions/{sid}"]):
                pass

    served(journal, "beta", check)


@pytest.mark.parametrize("until", ["²", "①", "٣", "+3", " 3", "3 ", "-1", "3.0", ""])
def test_a_prompt_until_not_a_seq_is_invalid_params(journal: Journal, until: str) -> None:
    # str.isdigit() holds for "²" and "①", which int() refuses, and for "٣", which it reads as 3.
    sid = seed(journal)

    async def check(client: Client) -> None:
        with pytest.raises(MCPError, match="until must be a seq") as raised:
            await client.get_prompt("continue_session", {"session_id": sid, "until": until})
        assert raised.value.error.code == -32602  # invalid params, not an internal error

    served(journal, "acme", check)


@pytest.mark.parametrize("suffix", ["\n", "/json\n"])
def test_a_resource_uri_with_a_trailing_newline_is_not_ours(journal: Journal, suffix: str) -> None:
    sid = seed(journal)

    async def check(client: Client) -> None:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(f"agentjournal://sessions/{sid}{suffix}")
        assert raised.value.error.code == -32002  # resource not found

    served(journal, "acme", check)

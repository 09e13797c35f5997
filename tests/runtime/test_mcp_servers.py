"""`MCPServer` specs and `load_mcp_servers`: a config file in the shape MCP clients use is read
as they read it, and every mistake is an `InvalidArgument` naming the server and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentjournal import InvalidArgument
from agentjournal.runtime import MCPServer, load_mcp_servers


def write(tmp_path: Path, servers: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_a_client_config_is_read_as_clients_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEARCH_TOKEN", "s3cret")
    path = write(
        tmp_path,
        {
            "files": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME_DIR:-/srv}"],
                "env": {"LOG": "quiet"},
            },
            "search": {
                "type": "http",
                "url": "https://search.example.com/mcp",
                "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"},
                "idempotent": ["find"],
                "timeout": 5,
            },
            "old": {"command": "old-server", "disabled": True},
        },
    )
    files, search = load_mcp_servers(path)
    assert files == MCPServer(
        "files",
        command="npx",
        args=("-y", "@modelcontextprotocol/server-filesystem", "/srv"),
        env={"LOG": "quiet"},
    )
    assert search.url == "https://search.example.com/mcp"
    assert search.headers == {"Authorization": "Bearer s3cret"}
    assert search.timeout == 5
    assert search.is_idempotent("find")
    assert not search.is_idempotent("delete")
    assert not files.is_idempotent("read_file")  # nothing is, unless declared
    assert MCPServer("all", command="x", idempotent=True).is_idempotent("anything")


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        ({"a": {"comand": "x"}}, "unknown keys ['comand']"),
        ({"a": {"type": "sse", "url": "http://h/sse"}}, "SSE transport is not supported"),
        ({"a": {"type": "websocket", "url": "ws://h"}}, "not stdio or http"),
        ({"a": {"url": "ftp://h"}}, "http:// or https://"),
        ({"a": {"command": "x", "url": "http://h"}}, "a stdio server has a command"),
        ({"a": {"command": ""}}, "command must be a non-empty string"),
        ({"a": {"command": "x", "args": "-y"}}, "args must be a list"),
        ({"a": {"command": "x", "args": [1]}}, "each of args must be a string"),
        ({"a": {"command": "x", "env": {"K": 1}}}, "env['K'] must be a string"),
        ({"a": {"command": "x", "headers": {"K": "v"}}}, "headers are for a url"),
        ({"a": {"command": "x", "timeout": 0}}, "timeout must be a positive number"),
        ({"a": {"command": "x", "timeout": "5"}}, "timeout must be a positive number"),
        ({"a": {"command": "x", "idempotent": "yes"}}, "idempotent must be true, false"),
        ({"a": {"command": "x", "idempotent": [""]}}, "each tool named in idempotent"),
        ({"a": {"command": "${NOT_SET_ANYWHERE}"}}, "no NOT_SET_ANYWHERE"),
        ({"a__b": {"command": "x"}}, "without '__'"),
        ({"a b": {"command": "x"}}, "1 to 32 letters"),
        ({"a": "npx server"}, "each server is a JSON object"),
        ({"a": {"command": "x", "idempotent": [{"tool": "t"}]}}, "each tool named in idempotent"),
        ({"a": {"command": "x", "disabled": "yes"}}, "disabled must be true or false"),
    ],
)
def test_mistakes_are_typed_errors_naming_the_server(
    tmp_path: Path, servers: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidArgument, match="MCP server") as raised:
        load_mcp_servers(write(tmp_path, servers))
    assert says in str(raised.value)


def test_a_file_that_is_not_a_config_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "typo.json"
    with pytest.raises(InvalidArgument, match="cannot read the MCP servers file"):
        load_mcp_servers(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(InvalidArgument, match="is not JSON"):
        load_mcp_servers(broken)
    broken.write_text('{"servers": {}}', encoding="utf-8")
    with pytest.raises(InvalidArgument, match='needs an object "mcpServers"'):
        load_mcp_servers(broken)


def test_names_are_unique_among_an_agents_servers() -> None:
    from agentjournal.runtime import Agent, ScriptedModel

    twice = [MCPServer("a", command="x"), MCPServer("a", command="y")]
    with pytest.raises(InvalidArgument, match="must be unique"):
        Agent(ScriptedModel({}, "hi"), mcp_servers=twice)
    with pytest.raises(InvalidArgument, match="takes MCPServer"):
        Agent(ScriptedModel({}, "hi"), mcp_servers=[{"name": "a"}])  # type: ignore[list-item]


def test_no_two_servers_can_give_a_tool_the_same_name() -> None:
    """`a_`'s tool `x` and `a`'s tool `_x` would both be `a___x` to the model: which one a call
    ran would hang on which server answered first. A name ending in '_' is refused (a tool name
    is then split at its first '__' into its one server and that server's tool)."""
    from agentjournal.runtime.mcp_tools import exposed_name

    assert exposed_name("a", "_x") == exposed_name("a_", "x")
    with pytest.raises(InvalidArgument, match="MCP server name 'a_'"):
        MCPServer("a_", command="x")
    MCPServer("_a", command="x")  # a leading '_' leaves the split unambiguous

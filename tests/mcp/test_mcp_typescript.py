"""agentjournal's MCP server as the official TypeScript SDK's client sees it
(`@modelcontextprotocol/sdk` from npm, driven by ts_client.mjs with node): over stdio
(`agentjournal mcp`) and over streamable HTTP (`/mcp` of a keyed `serve`), every tool, a resource
and the prompt, hostile arguments, and a key of another tenant finding nothing. The SDK also
checks each structured result against the tool's output schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_checks import SECRET, seed

from agentjournal import Journal
from npm_packages import npm_root
from server.conftest import create_keys, launch

CLIENT = Path(__file__).with_name("ts_client.mjs")
TOOLS = ["search", "list_sessions", "read_session", "tool_calls", "replay", "fork"]


def run_client(**options: Any) -> dict[str, Any]:
    done = subprocess.run(
        ["node", str(CLIENT), json.dumps({"npm_root": str(npm_root()), **options})],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def check_report(report: dict[str, Any], sid: str) -> None:
    assert [tool["name"] for tool in report["tools"]] == TOOLS
    assert all(tool["hasInputSchema"] and tool["hasOutputSchema"] for tool in report["tools"])
    for step in ("search", "list_sessions", "read_session", "tool_calls", "replay"):
        assert "threw" not in report[step], (step, report[step])
        assert report[step]["isError"] is False, (step, report[step])
    assert sid in {hit["session_id"] for hit in report["search"]["structured"]["hits"]}
    assert [s["session_id"] for s in report["list_sessions"]["structured"]["sessions"]] == [sid]
    window = report["read_session"]["structured"]
    assert ([e["seq"] for e in window["events"]], window["total"]) == ([4, 5], 5)
    [call] = report["tool_calls"]["structured"]["calls"]
    assert (call["name"], call["result"]) == ("refund", "refunded 30 EUR")
    messages = report["replay"]["structured"]["messages"]
    assert messages[-1] == {"role": "assistant", "content": "Order 4711 is refunded: 30 EUR."}
    assert f"agentjournal://sessions/{sid}" in report["resources"]
    [transcript] = report["transcript"]
    assert transcript["mimeType"] == "text/markdown"
    assert "Order 4711 is refunded" in transcript["text"]
    assert ["user", "Please refund order 4711, it never arrived"] in report["prompt"]
    wrong_type, too_long, injection, traversal, unknown = report["hostile"]
    assert wrong_type["isError"]
    assert "query: Input should be a valid string" in wrong_type["text"]
    assert too_long["isError"]
    assert "at most 500" in too_long["text"]
    assert injection["isError"] is False  # only words: it finds nothing, and harms nothing
    assert injection["structured"]["hits"] == []
    assert traversal["isError"]
    assert "session_id must be" in traversal["text"]
    assert unknown["isError"]
    assert "no tool named 'no_such_tool'" in unknown["text"]
    assert report["still_serving"]["isError"] is False


def test_the_typescript_client_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with Journal.open(db) as journal:
        sid = seed(journal)
    command = [sys.executable, "-m", "agentjournal.cli", "mcp", "--db", str(db)]
    report = run_client(
        session_id=sid,
        command=command[0],
        args=[*command[1:], "--tenant", "acme"],
        env={key: os.environ[key] for key in ("PATH", "HOME", "PYTHONPATH") if key in os.environ},
    )
    check_report(report, sid)


def test_the_typescript_client_over_http_with_keys(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with Journal.open(db) as journal:
        sid = seed(journal)
    keys = create_keys(db, ["acme", "beta"])
    running = launch(db, keys=keys)
    try:
        url = f"{running.base_url}/mcp"
        acme = run_client(session_id=sid, url=url, headers=running.headers("acme"))
        beta = run_client(session_id=sid, url=url, headers=running.headers("beta"))
    finally:
        running.stop()
    check_report(acme, sid)
    # A key of tenant beta: none of acme's sessions, acme's session as missing as a made-up one.
    assert beta["search"]["structured"]["hits"] == []
    titles = [s["title"] for s in beta["still_serving"]["structured"]["sessions"]]
    assert titles == ["beta plans"]
    assert beta["read_session"]["isError"]
    assert f"session '{sid}' not found" in beta["read_session"]["text"]
    assert f"agentjournal://sessions/{sid}" not in beta["resources"]
    assert SECRET not in json.dumps(acme)

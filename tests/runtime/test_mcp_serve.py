"""`agentjournal serve --agent ... --mcp-servers FILE`: the served agent's turns call the tools of
the servers the file names (a client's config, as MCP clients write it), and a file with a
mistake, or without --agent, ends the command with one line before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from server.conftest import launch

HERE = Path(__file__).parent
LEDGER_SERVER = HERE / "mcp_ledger_server.py"


def config(tmp_path: Path, ledger: Path) -> Path:
    path = tmp_path / "mcp.json"
    servers = {
        "ledger": {
            "command": sys.executable,
            "args": [str(LEDGER_SERVER)],
            "env": {"LEDGER": str(ledger)},
        }
    }
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_a_served_agent_calls_the_tools_of_the_configured_servers(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    running = launch(
        tmp_path / "served.db",
        "--agent",
        "mcp_shop_agent:shop",
        "--mcp-servers",
        str(config(tmp_path, ledger)),
        env=env,
    )
    try:
        with httpx.Client(base_url=running.base_url, timeout=60.0) as http:
            made = http.post("/v1/sessions", json={"metadata": {"agent": "shop"}})
            sid = made.json()["session_id"]
            answered = http.post(f"/v1/sessions/{sid}/turns", json={"content": "order a book"})
            assert answered.status_code == 201, answered.text
            assert answered.json()["reply"] == "done: ordered 1 x book (order #1)"
            page = http.get(f"/v1/sessions/{sid}/events").json()
        [call] = [e["payload"] for e in page["events"] if e["type"] == "tool_call"]
        assert (call["mcp_server"], call["mcp_tool"]) == ("ledger", "place_order")
        assert ledger.read_text().splitlines() == ["order book x1"]
    finally:
        assert running.stop() == 0
    assert "agent      mcp_shop_agent:shop (MCP servers: ledger)" in running.log()


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_mistakes_end_serve_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"ledger": {"comand": "x"}}}', encoding="utf-8")
    for args, says in [
        (["--mcp-servers", str(bad)], "--mcp-servers gives an agent tools: it needs --agent"),
        (["--agent", "demo", "--mcp-servers", str(bad)], "unknown keys ['comand']"),
        (["--agent", "demo", "--mcp-servers", str(tmp_path / "no.json")], "cannot read"),
    ]:
        done = serve("--db", str(db), *args)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not db.exists()

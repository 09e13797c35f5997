"""The runtime against the TypeScript SDK's own example server over streamable HTTP
(`examples/server/simpleStreamableHttp.js` of `@modelcontextprotocol/sdk`, from npm, run with
node): a turn through its tools, text and resource links, one of them taking seconds while it
logs to the session."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentjournal import Journal
from agentjournal.runtime import Agent, MCPServer, ModelReply, RequestedCall, Tool
from npm_packages import package_dir

WAIT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def example_server() -> Iterator[str]:
    """The SDK's example server on a free port; its MCP URL while the block runs."""
    sdk = package_dir("@modelcontextprotocol/sdk")
    script = sdk / "dist" / "esm" / "examples" / "server" / "simpleStreamableHttp.js"
    port = free_port()
    with subprocess.Popen(
        ["node", str(script)],
        env={**os.environ, "MCP_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as process:
        try:
            deadline = time.monotonic() + WAIT
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("localhost", port)):
                    break
                assert process.poll() is None, "the example server exited"
                assert time.monotonic() < deadline, "the example server did not listen"
                time.sleep(0.05)
            yield f"http://localhost:{port}/mcp"
        finally:
            process.terminate()


class PlanModel:
    """Calls the planned tools one step at a time, then answers with the results it read."""

    def __init__(self, plan: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.plan = list(plan)

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if len(results) < len(self.plan):
            name, arguments = self.plan[len(results)]
            call = RequestedCall(f"step_{len(results) + 1}", name, json.dumps(arguments))
            return ModelReply(tool_calls=(call,))
        return ModelReply(json.dumps(results))


def test_a_turn_through_the_sdk_example_server_over_http(tmp_path: Path) -> None:
    plan = [
        ("example__greet", {"name": "Ada"}),
        ("example__list-files", {}),
        ("example__multi-greet", {"name": "Bob"}),
    ]
    with example_server() as url:
        agent = Agent(PlanModel(plan), mcp_servers=[MCPServer("example", url=url)])
        try:
            with Journal.open(tmp_path / "journal.db") as journal:
                sid = agent.create_session(journal).session_id
                turn = agent.run_turn(journal, sid, "greet and list")
                calls = journal.tool_calls(sid)
        finally:
            agent.close()
    greeted, files, greeted_again = json.loads(turn.reply)
    assert greeted == "Hello, Ada!"
    assert "[resource link https://example.com/greetings/default: Default Greeting]" in files
    assert "[resource link file:///example/file1.txt: Example File 1]" in files
    assert greeted_again == "Good morning, Bob!"
    assert [c.status for c in calls] == ["ok", "ok", "ok"]

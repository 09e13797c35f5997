"""A small MCP server, built on the official SDK, whose tools the runtime's tests call.

`place_order` and `count_visit` each add a line to the ledger file (`LEDGER`, synced before they
answer): the side effect a test counts. With `KILL_PARENT` naming one of them, that tool SIGKILLs
the process that started it (the agent, over stdio) once its line is synced and before it
answers: a turn cut between a tool's call and its result, the side effect done.

Run: python mcp_ledger_server.py            (stdio)
     python mcp_ledger_server.py PORT       (streamable HTTP on 127.0.0.1:PORT, at /mcp)
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("ledger", log_level="CRITICAL")


def record(line: str, tool: str) -> int:
    """Append `line` to the ledger, synced; how many lines it has now."""
    parent = os.getppid()
    path = os.environ["LEDGER"]
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    with open(path, encoding="utf-8") as ledger:
        count = sum(1 for _ in ledger)
    if os.environ.get("KILL_PARENT") == tool:
        os.kill(parent, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.01)  # until it is gone: no answer can reach it
        os._exit(0)
    return count


@server.tool()
def place_order(item: str, quantity: int = 1) -> str:
    """Order `quantity` of `item` (not idempotent: each call orders again)."""
    count = record(f"order {item} x{quantity}", "place_order")
    return f"ordered {quantity} x {item} (order #{count})"


@server.tool()
def count_visit(page: str) -> str:
    """Count a visit of `page` (declared idempotent by the tests that use it)."""
    return f"visit #{record(f'visit {page}', 'count_visit')} of {page}"


@server.tool()
def lookup(sku: str) -> dict[str, object]:
    """The stock of `sku` (read-only; structured output)."""
    return {"sku": sku, "in_stock": sku != "none", "count": 3}


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, with `reason` (a tool error, isError)."""
    raise ToolError(reason)


@server.tool()
def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    time.sleep(seconds)
    return "slept"


@server.tool()
def invocation(ctx: Context) -> str:
    """The invocation key the caller sent in the request's `_meta`."""
    return str((ctx.request_context.meta or {}).get("agentjournal/invocation"))


@server.tool()
def crash() -> str:
    """Ends the server's process without answering."""
    os._exit(1)


@server.tool()
def hang(seconds: float) -> str:
    """Notes that it began (a ledger line), then answers after `seconds`."""
    record("hang", "hang")
    time.sleep(seconds)
    return "hung"


@server.tool()
def nul() -> str:
    """Text with U+0000 in it, which the journal does not store as it is."""
    return "before\x00after"


@server.tool()
def huge(chars: int) -> str:
    """A result of `chars` characters."""
    return "x" * chars


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()

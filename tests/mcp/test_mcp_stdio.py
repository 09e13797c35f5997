"""`agentjournal mcp` as a real subprocess, driven by the SDK's stdio client: the recall checks,
the refusals, a handshake-era `resources/subscribe` told of an event another connection appends,
and the writing tools only with --allow-writes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp_checks import check_recall, check_refusals, seed

from agentjournal import Journal
from mcp import Client, StdioServerParameters


def params(db: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentjournal.cli", "mcp", "--db", str(db), *args],
        env={**os.environ},
    )


def test_recall_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with Journal.open(db) as journal:
        sid = seed(journal)

    async def run() -> None:
        async with Client(params(db, "--tenant", "acme")) as client:
            await check_recall(client, sid)
            await check_refusals(client, sid)

    asyncio.run(run())


def test_a_legacy_subscriber_is_told_of_a_new_event(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with Journal.open(db) as journal:
        sid = seed(journal)
    uri = f"agentjournal://sessions/{sid}"
    updated: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.put_nowait(message.params.uri)

    async def run() -> None:
        client = Client(params(db, "--tenant", "acme"), mode="legacy", message_handler=on_message)
        async with client:
            with warnings.catch_warnings():  # resources/subscribe is the 2025 era's way
                warnings.simplefilter("ignore")
                await client.subscribe_resource(uri)
            with Journal.open(db, tenant="acme") as other:  # another process' connection
                other.append(sid, "user_message", {"content": "and 4712?"})
            assert await updated.get() == uri

    asyncio.run(run())


def test_writes_need_the_flag_and_a_missing_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"

    async def run() -> None:
        async with Client(params(db, "--allow-writes")) as client:
            made = await client.call_tool("create_session", {"title": "from stdio"})
            assert not made.is_error

    asyncio.run(run())
    with Journal.open(db) as journal:
        assert [s.title for s in journal.sessions()] == ["from stdio"]
    missing = tmp_path / "typo.db"
    done = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "mcp", "--db", str(missing)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "no database at" in done.stderr
    assert not missing.exists()

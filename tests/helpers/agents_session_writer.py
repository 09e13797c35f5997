"""The child of tests/integrations/test_openai_agents_durability.py: writes Responses items
through `JournalSession` (the OpenAI Agents SDK's `Session`), in one of two modes.

    python agents_session_writer.py race URL SESSION WRITER BATCHES
    python agents_session_writer.py crash URL SESSION

`race`: opens `JournalSession.open(URL, SESSION)`, prints "ready", waits for a line on stdin (so
that several processes start together), then adds BATCHES batches `turn_items(WRITER, n)`,
n = 0..BATCHES-1, one `add_items` each, and prints one JSON object: {"writer", "added", "errors"}
(an error stops the writer; there should be none).

`crash`: a fork server. Importing the Agents SDK takes seconds, too long to pay for each of the
crash test's kills, so this process imports it once and, for every line "run" on stdin, forks a
writer: it opens `JournalSession.open(URL, SESSION)`, finds the last batch the session holds,
prints "started <pid> <last>", then loops `add_items(crash_batch(n))` for n = last+1, last+2, ...
and prints "acked <n>" (flushed) as soon as each returns. The parent kills it with SIGKILL; this
process reaps it and prints "exited <pid> <exit code>" (-9 for SIGKILL), after every line the
writer wrote. A writer's error is printed as "error ..." and ends it. A writer not killed within
a minute gives up by itself, and the server ends at the end of its stdin, so nothing outlives a
dead test for long.

Both modes open the journal only after forking or starting: no SQLite connection crosses a fork.
The tests load `turn_items` and `crash_batch` from this file, so both sides agree on the items.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from agentjournal.integrations.openai_agents import JournalSession

GIVE_UP_AFTER = 60.0


def turn_items(writer: str, n: int) -> list[dict[str, Any]]:
    """One conversational turn: the user's question, the model's answer (which has an id)."""
    return [
        {"role": "user", "content": f"{writer}: how many orders are still open? ({n})"},
        {
            "id": f"msg_{writer}_{n:04d}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": f"{writer}: {n} orders are still open.",
                    "annotations": [],
                }
            ],
        },
    ]


def crash_batch(n: int) -> list[dict[str, Any]]:
    """A user message, the model's function call (with an id) and the call's output."""
    call_id = f"call_{n:06d}"
    return [
        {"role": "user", "content": f"How many orders were placed on day {n}?"},
        {
            "id": f"fc_{n:06d}",
            "type": "function_call",
            "call_id": call_id,
            "name": "count_orders",
            "arguments": json.dumps({"day": n}),
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": call_id, "output": json.dumps({"count": n})},
    ]


def last_batch(items: list[Any]) -> int:
    """The number of the newest batch whose function call output the items hold (0: none)."""
    for item in reversed(items):
        if item.get("type") == "function_call_output":
            return int(item["call_id"].removeprefix("call_"))
    return 0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()  # one write(2) of a whole short line: a kill never cuts it in half


async def race(url: str, session_id: str, writer: str, batches: int) -> None:
    added = 0
    errors: list[str] = []
    async with JournalSession.open(url, session_id) as session:
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        try:
            for n in range(batches):
                await session.add_items(turn_items(writer, n))  # type: ignore[arg-type]
                added += 1
        except Exception as exc:
            errors.append(f"{writer}: {type(exc).__name__}: {exc}")
    say(json.dumps({"writer": writer, "added": added, "errors": errors}))


async def write_until_killed(url: str, session_id: str) -> None:
    deadline = time.monotonic() + GIVE_UP_AFTER
    async with JournalSession.open(url, session_id) as session:
        n = last_batch(await session.get_items())
        say(f"started {os.getpid()} {n}")
        while time.monotonic() < deadline:
            n += 1
            await session.add_items(crash_batch(n))  # type: ignore[arg-type]
            say(f"acked {n}")
    say("error: not killed within a minute")


def crash_server(url: str, session_id: str) -> None:
    for line in sys.stdin:
        if line.strip() != "run":
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                asyncio.run(write_until_killed(url, session_id))
            except BaseException as exc:
                say(f"error: {type(exc).__name__}: {exc}")
                code = 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        say(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


def main() -> None:
    mode, url, session_id, *rest = sys.argv[1:]
    if mode == "race":
        writer, batches = rest
        asyncio.run(race(url, session_id, writer, int(batches)))
    elif mode == "crash":
        crash_server(url, session_id)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

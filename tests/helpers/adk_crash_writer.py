"""The child of tests/integrations/test_adk_atomic.py's crash test: a fork server whose writers
append ADK events with `app:`, `user:` and session state deltas until they are SIGKILLed.

    python adk_crash_writer.py URL

Importing ADK takes seconds, too long to pay for each kill, so this process imports it once
and, for every line "run" on stdin, forks a writer: it opens a `JournalSessionService` over URL,
gets (or creates) the sessions "s1" and "s2" of app "shop", user "u", finds the newest event
number n they hold, prints "started <pid> <n>", then loops `append_event(sessions[n % 2],
crash_event(n))` for n+1, n+2, ... and prints "acked <n>" (flushed) as soon as each returns.
The parent kills it with SIGKILL; this process reaps it and prints "exited <pid> <exit code>"
(-9 for SIGKILL), after every line the writer wrote. A writer's error is printed as "error ..."
and ends it; a writer not killed within a minute gives up by itself, and the server ends at the
end of its stdin. The journal is opened only after forking: no connection crosses a fork. The
test loads `crash_event` from this file, so both sides agree on the events.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from google.adk.events import Event, EventActions
from google.adk.sessions import Session
from google.genai import types

from agentjournal.integrations.adk import JournalSessionService

APP, USER, SESSIONS = "shop", "u", ("s1", "s2")
GIVE_UP_AFTER = 60.0


def crash_event(n: int) -> Event:
    """Event n: a user message that sets the app's, the user's and the session's `n`, and adds
    a key of its own to the app's and the user's state."""
    delta = {"n": n, "app:n": n, f"app:k{n}": n, "user:n": n, f"user:k{n}": n}
    return Event(
        id=f"e{n:06d}",
        author="user",
        invocation_id=f"inv-{n}",
        timestamp=1000.0 + n,
        content=types.Content(role="user", parts=[types.Part(text=f"message {n}")]),
        actions=EventActions(state_delta=delta),
    )


def number(event: Event) -> int:
    return int(event.id.removeprefix("e"))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()  # one write(2) of a whole short line: a kill never cuts it in half


async def session(service: JournalSessionService, sid: str) -> Session:
    found = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
    if found is None:
        found = await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    return found


async def write_until_killed(url: str) -> None:
    deadline = time.monotonic() + GIVE_UP_AFTER
    async with JournalSessionService.open(url) as service:
        sessions = [await session(service, sid) for sid in SESSIONS]
        n = max((number(e) for s in sessions for e in s.events), default=0)
        say(f"started {os.getpid()} {n}")
        while time.monotonic() < deadline:
            n += 1
            await service.append_event(sessions[n % 2], crash_event(n))
            say(f"acked {n}")
    say("error: not killed within a minute")


def main() -> None:
    (url,) = sys.argv[1:]
    for line in sys.stdin:
        if line.strip() != "run":
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                asyncio.run(write_until_killed(url))
            except BaseException as exc:
                say(f"error: {type(exc).__name__}: {exc}")
                code = 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        say(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()

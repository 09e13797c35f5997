"""The crash test's child: 16 writer threads append until the parent SIGKILLs the process.

    python crash_writer.py URL DURABILITY RUN SHARED_IDS SEED

URL is what `Journal.open` takes: a SQLite file path or a `postgresql://` URL.

Each thread creates a session of its own, then loops: `append` of one event, or `append_many` of
a batch of 2-5 events, to its own session (with `expected_seq`, which must always hold there) or to
one of the shared sessions. As soon as a call returns, the thread writes one JSON line to stdout
(flushed) acknowledging it: {"session", "batch", "events": [[event_id, seq, type, tag], ...]}.
Every event's payload carries its unique "tag"; a batch's events also carry "batch" (the batch's
tag), "index" and "size", so the parent can tell whether a batch was stored whole. An error is
reported as {"error": "..."}: there should be none. The process exits by itself after a minute,
in case the parent died before killing it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from typing import Any

from agentjournal import Event, Journal

THREADS = 16
GIVE_UP_AFTER = 60.0


def main() -> None:
    url, durability, run, shared_ids, seed = sys.argv[1:6]
    shared = shared_ids.split(",")
    out = threading.Lock()
    journal = Journal.open(url, durability=durability)  # type: ignore[arg-type]

    def report(line: dict[str, Any]) -> None:
        text = json.dumps(line) + "\n"
        with out:
            sys.stdout.write(text)
            sys.stdout.flush()

    def ack(session_id: str, batch: str | None, events: list[Event]) -> None:
        report(
            {
                "session": session_id,
                "batch": batch,
                "events": [[e.event_id, e.seq, e.type, e.payload.get("tag")] for e in events],
            }
        )

    def single(tag: str, n: int) -> tuple[str, dict[str, Any]]:
        if n % 3 == 0:
            return "crash.note", {"tag": tag, "filler": "x" * (n % 200)}
        return "user_message", {"content": f"message {tag}", "tag": tag}

    def batch_events(tag: str, size: int) -> list[dict[str, Any]]:
        # A model response as the runtime writes it: text, then tool calls and their results.
        kinds: list[tuple[str, dict[str, Any]]] = [("assistant_message", {"content": tag})]
        call = 0
        while len(kinds) < size:
            call_id = f"{tag}/call{call}"
            kinds.append(("tool_call", {"call_id": call_id, "name": "lookup", "arguments": "{}"}))
            if len(kinds) < size:
                kinds.append(("tool_result", {"call_id": call_id, "content": "42"}))
            call += 1
        return [
            {
                "type": type_,
                "payload": {
                    **payload,
                    "tag": f"{tag}/{index}",
                    "batch": tag,
                    "index": index,
                    "size": size,
                },
            }
            for index, (type_, payload) in enumerate(kinds)
        ]

    def write(thread: int) -> None:
        rng = random.Random(f"{seed}/{thread}")
        try:
            own = journal.create_session(f"run {run} thread {thread}")
            ack(own.session_id, None, journal.events(own.session_id, limit=1))
            last_seq = 1
            n = 0
            while True:
                n += 1
                tag = f"{run}/{thread}/{n}"
                mine = rng.random() < 0.4
                sid = own.session_id if mine else rng.choice(shared)
                expected = last_seq if mine else None
                if rng.random() < 0.5:
                    type_, payload = single(tag, n)
                    stored = [journal.append(sid, type_, payload, expected_seq=expected)]
                    ack(sid, None, stored)
                else:
                    events = batch_events(tag, rng.randint(2, 5))
                    stored = journal.append_many(sid, events, expected_seq=expected)
                    ack(sid, tag, stored)
                if mine:
                    last_seq = stored[-1].seq
        except Exception as exc:
            report({"error": f"thread {thread}: {type(exc).__name__}: {exc}"})

    for thread in range(THREADS):
        threading.Thread(target=write, args=(thread,), daemon=True).start()
    time.sleep(GIVE_UP_AFTER)
    report({"error": "not killed within a minute"})
    os._exit(3)


if __name__ == "__main__":
    main()

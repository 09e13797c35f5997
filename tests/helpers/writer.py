"""A writer process for the cross-process tests: opens its own Journal on a shared database (a
SQLite file path or a `postgresql://` URL, as `Journal.open` takes it) and appends.

    python writer.py URL NAME --shared S1,S2 --threads 4 --ops 30 [--wait] [--delay 0.01]

Each thread creates a session of its own, then does `ops` operations, alternating between the
shared sessions and its own, mixing `append` and `append_many` (a user message, a tool call and its
result). Every event's payload carries a unique "tag" (`NAME/thread/op/index`). With `--wait` the
process prints "ready" once its Journal is open and starts only when a line arrives on stdin, so
several processes start together. At the end it prints one JSON object: every acknowledged event
as [event_id, session_id, seq, type, tag, op], and every error raised (there should be none).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from agentjournal import Event, Journal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--shared", default="")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--ops", type=int, default=30)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--singles-only", action="store_true")
    args = parser.parse_args()
    shared = [s for s in args.shared.split(",") if s]

    acks: list[list[Any]] = []
    errors: list[str] = []
    lock = threading.Lock()

    with Journal.open(args.url) as journal:
        if args.wait:
            print("ready", flush=True)
            sys.stdin.readline()

        def record(events: list[Event], op: str | None) -> None:
            with lock:
                acks.extend(
                    [e.event_id, e.session_id, e.seq, e.type, e.payload.get("tag"), op]
                    for e in events
                )

        def write(thread: int) -> None:
            try:
                own = journal.create_session(f"{args.name}/{thread}")
                created = journal.events(own.session_id, limit=1)
                record(created, None)
                targets = [*shared, own.session_id]
                for op in range(args.ops):
                    sid = targets[op % len(targets)]
                    tag = f"{args.name}/{thread}/{op}"
                    if args.singles_only or op % 3:
                        payload = {"content": tag, "tag": f"{tag}/0"}
                        record([journal.append(sid, "user_message", payload)], tag)
                    else:
                        batch = [
                            ("assistant_message", {"content": tag}),
                            ("tool_call", {"call_id": tag, "name": "lookup", "arguments": "{}"}),
                            ("tool_result", {"call_id": tag, "content": "42"}),
                        ]
                        events = [
                            {"type": type_, "payload": {**payload, "tag": f"{tag}/{index}"}}
                            for index, (type_, payload) in enumerate(batch)
                        ]
                        record(journal.append_many(sid, events), tag)
                    if args.delay:
                        time.sleep(args.delay)
            except Exception as exc:
                with lock:
                    errors.append(f"{args.name}/{thread}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=write, args=(t,)) for t in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    print(json.dumps({"acks": acks, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()

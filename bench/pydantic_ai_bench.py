"""PydanticAI conversations kept in the journal (`JournalHistory`, `JournalConversationStore`)
beside what PydanticAI's docs suggest, dumping `all_messages()` to a JSON file with
`ModelMessagesTypeAdapter` and reading it back before the next run: the same turns, the same
machine, the same run.

    .venv/bin/python bench/pydantic_ai_bench.py            # the full run (100 and 400 turns)
    .venv/bin/python bench/pydantic_ai_bench.py --quick    # a smoke run (5 and 20 turns)

A turn is what a run with one tool call adds: the user's prompt (~200 characters, a third of them
Chinese, from a fixed seed), the model's tool call, the tool's return and the model's reply (~200
characters), four messages. No model runs: the figures are the stores'. Each turn is `load`
(the history, as `message_history=` takes it) then `save` (the turn's four messages), both timed;
the figure at N turns is the median over the turns just before N (the last N/2, at most 50; the
turns before those are saved at once, untimed, to keep the run short), and the bytes on disk
are read at N (SQLite: the file and its WAL after a checkpoint).

The stores, each in a fresh directory (PostgreSQL: a fresh schema on `--url`, skipped with a note
if it cannot be reached), one after the other in this process:

- `JSON file`: `path.write_bytes(ModelMessagesTypeAdapter.dump_json(all_messages))`, read back
  with `validate_json`: what the docs show; not durable (no fsync: a power cut can lose it or
  leave it half written).
- `JSON file + fsync`: the same, written to a temporary file, fsynced and renamed over the old
  one: the least a file needs to survive a power cut whole, as the journal does.
- `JournalHistory` on SQLite and on PostgreSQL, at the journal's default `durability="full"`.
- `JournalConversationStore` on SQLite: PydanticAI's `ConversationStore` (`load`, then `save`).

Target (issue 34): never slower per save than the JSON file, at every size.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import os
import platform
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

WINDOW_CAP = 50
STORES = (
    "JSON file",
    "JSON file + fsync",
    "JournalHistory (SQLite)",
    "JournalHistory (PostgreSQL)",
    "JournalConversationStore (SQLite)",
)
BASELINE = "JSON file"


def text(rng: random.Random, size: int = 200) -> str:
    words = ["订单", "查询", "数量", "status", "order", "the", "shipping", "地址", "refund", "42"]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(words))
    return " ".join(out)[:size]


def turn_messages(rng: random.Random, turn: int) -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.usage import RequestUsage

    call_id = f"call-{turn}"
    usage = RequestUsage(input_tokens=50 * turn, output_tokens=40)
    return [
        ModelRequest([UserPromptPart(text(rng))]),
        ModelResponse(
            [ToolCallPart("query_order_count", {"user": "user-42"}, call_id)],
            usage=usage,
            model_name="bench",
        ),
        ModelRequest([ToolReturnPart("query_order_count", {"count": 42}, call_id)]),
        ModelResponse([TextPart(text(rng))], usage=usage, model_name="bench"),
    ]


class JsonFile:
    def __init__(self, path: Path, fsync: bool) -> None:
        self.path, self.fsync = path, fsync

    def load(self) -> list[Any]:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        if not self.path.exists():
            return []
        return ModelMessagesTypeAdapter.validate_json(self.path.read_bytes())

    def save(self, history: list[Any], new: list[Any]) -> None:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        data = ModelMessagesTypeAdapter.dump_json(history + new)
        if not self.fsync:
            self.path.write_bytes(data)
            return
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def size(self) -> int:
        return self.path.stat().st_size


class History:
    def __init__(self, url: str, path: str | None) -> None:
        from agentjournal.integrations.pydantic_ai import JournalHistory

        self.history = JournalHistory.open(url, "user-42")
        self.path = path

    def load(self) -> list[Any]:
        return self.history.load()

    def save(self, history: list[Any], new: list[Any]) -> None:
        self.history.save(new)

    def size(self) -> int:
        assert self.path is not None
        return sqlite_bytes(self.path, self.history.journal.storage.checkpoint)

    def close(self) -> None:
        self.history.close()


class Store:
    def __init__(self, path: str) -> None:
        from agentjournal.integrations.pydantic_ai_store import JournalConversationStore

        self.store = JournalConversationStore.open(path)
        self.path = path
        self.loop = asyncio.new_event_loop()
        self.conversation: Any = None

    def load(self) -> list[Any]:
        from pydantic_ai.conversation import Conversation

        loaded = self.loop.run_until_complete(self.store.load("user-42"))
        self.conversation = loaded or Conversation(conversation_id="user-42")
        return list(self.conversation.messages)

    def save(self, history: list[Any], new: list[Any]) -> None:
        self.conversation.messages.extend(new)
        self.loop.run_until_complete(self.store.save(self.conversation))

    def size(self) -> int:
        return sqlite_bytes(self.path, self.store.journal.storage.checkpoint)

    def close(self) -> None:
        self.loop.close()
        self.store.close()


def sqlite_bytes(path: str, checkpoint: Callable[[], Any]) -> int:
    checkpoint()
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def with_options(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | options
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    import psycopg

    schema = f"pa_bench_{secrets.token_hex(6)}"
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def open_store(name: str, where: str) -> Iterator[Any]:
    if name.startswith("JSON file"):
        yield JsonFile(Path(where) / "history.json", fsync=name.endswith("fsync"))
    elif name == "JournalHistory (SQLite)":
        path = os.path.join(where, "history.db")
        store = History(path, path)
        try:
            yield store
        finally:
            store.close()
    elif name == "JournalHistory (PostgreSQL)":
        with fresh_schema(where) as schema:
            store = History(with_options(where, schema=schema), None)
            try:
                yield store
            finally:
                store.close()
    else:
        conversations = Store(os.path.join(where, "store.db"))
        try:
            yield conversations
        finally:
            conversations.close()


def run_store(name: str, where: str, sizes: tuple[int, ...]) -> dict[str, float]:
    rng = random.Random(42)
    figures: dict[str, float] = {}
    turn = 0
    with open_store(name, where) as store:
        for size in sizes:
            window = min(WINDOW_CAP, max(1, size // 2))
            if turn < size - window:  # the turns before the window, saved at once (untimed)
                bulk = [
                    m for t in range(turn + 1, size - window + 1) for m in turn_messages(rng, t)
                ]
                store.save(store.load(), bulk)
                turn = size - window
            loads: list[float] = []
            saves: list[float] = []
            while turn < size:
                turn += 1
                new = turn_messages(rng, turn)
                started = time.perf_counter()
                history = store.load()
                loaded = time.perf_counter()
                store.save(history, new)
                saved = time.perf_counter()
                assert len(history) == 4 * (turn - 1), name
                loads.append(loaded - started)
                saves.append(saved - loaded)
            figures[f"load@{size}"] = statistics.median(loads)
            figures[f"save@{size}"] = statistics.median(saves)
            if "PostgreSQL" not in name:
                figures[f"bytes@{size}"] = store.size()
        assert len(store.load()) == 4 * max(sizes), name
    return figures


def postgres_reachable(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def fmt_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB"):
        if count < 1024 or unit == "MB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return str(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 and 20 turns")
    parser.add_argument("--dir", default=None, help="where the files go (a temp dir in it)")
    parser.add_argument("--url", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    sizes = (5, 20) if args.quick else (100, 400)
    problem = postgres_reachable(args.url)
    names = [n for n in STORES if problem is None or "PostgreSQL" not in n]
    print(f"# PydanticAI conversations{' (QUICK: sizes 5 and 20)' if args.quick else ''}")
    version = importlib.metadata.version("pydantic-ai-slim")
    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC · Python"
        f" {platform.python_version()} · {os.cpu_count()} CPUs · pydantic-ai-slim {version}"
    )
    if problem is not None:
        print(f"PostgreSQL skipped: {problem}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for index, name in enumerate(names):
            where = args.url if "PostgreSQL" in name else os.path.join(tmp, str(index))
            if "PostgreSQL" not in name:
                os.mkdir(where)
            results[name] = run_store(name, where, sizes)
    base = results[BASELINE]
    print()
    print("| store | measure | figure | ÷ JSON file | target | met? |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        figures = results[name]
        for measure in ("save", "load", "bytes"):
            for size in sizes:
                key = f"{measure}@{size}"
                if key not in figures:
                    continue
                shown = fmt_bytes if measure == "bytes" else fmt_time
                ratio = figures[key] / base[key]
                target = met = ""
                if measure == "save" and name.startswith("Journal"):
                    target, met = "≤ 1", "yes" if ratio <= 1 else "NO"
                print(
                    f"| {name} | {measure} @{size} turns | {shown(figures[key])} |"
                    f" {ratio:.2f} | {target} | {met} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

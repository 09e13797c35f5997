"""`JournalSaver.put` and `put_writes` refuse bad input before the thread's session exists: a
malformed checkpoint or writes list is `InvalidArgument` (not a bare KeyError), a value over the
payload limit `PayloadTooLarge`, and a thread's first put or write that fails leaves no session
behind. On real SQLite files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from agentjournal import InvalidArgument, PayloadTooLarge
from agentjournal.integrations.langgraph import JournalSaver


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[JournalSaver]:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        yield saver


def config(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **extra}}


def good() -> dict[str, Any]:
    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["channel_values"] = {"seen": [1]}
    checkpoint["channel_versions"] = {"seen": "1"}
    return checkpoint


def without(key: str) -> dict[str, Any]:
    checkpoint = good()
    del checkpoint[key]
    return checkpoint


def but(**fields: Any) -> dict[str, Any]:
    return {**good(), **fields}


MALFORMED = {
    "no id": (without("id"), "id"),
    "no channel_values": (without("channel_values"), "channel_values"),
    "no channel_versions": (without("channel_versions"), "channel_versions"),
    "id not a str": (but(id=7), "id"),
    "empty id": (but(id=""), "id"),
    "channel_values not a dict": (but(channel_values=[1]), "channel_values"),
    "channel_versions not a dict": (but(channel_versions="1"), "channel_versions"),
    "not a dict": ([("id", "x")], "checkpoint"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_checkpoint_is_refused_before_the_thread_exists(
    saver: JournalSaver, case: str
) -> None:
    checkpoint, named = MALFORMED[case]
    with pytest.raises(InvalidArgument, match=named):
        saver.put(config("t"), checkpoint, {}, {"seen": "1"})  # type: ignore[arg-type]
    assert saver.journal.sessions(status="all") == []


@pytest.mark.parametrize(
    ("metadata", "new_versions", "named"),
    [(None, {"seen": "1"}, "metadata"), ({}, ["seen"], "new_versions")],
)
def test_malformed_metadata_or_versions_are_refused_before_the_thread_exists(
    saver: JournalSaver, metadata: Any, new_versions: Any, named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named):
        saver.put(config("t"), good(), metadata, new_versions)  # type: ignore[arg-type]
    assert saver.journal.sessions(status="all") == []


def test_a_first_put_too_large_for_the_journal_leaves_no_session(saver: JournalSaver) -> None:
    # A list that large is stored as a chain of blobs; a value of another kind cannot be.
    huge = but(channel_values={"seen": "x" * 2_000_000})
    with pytest.raises(PayloadTooLarge):
        saver.put(config("t"), huge, {}, {"seen": "1"})  # type: ignore[arg-type]
    assert saver.journal.sessions(status="all") == []
    saved = saver.put(config("t"), good(), {}, {"seen": "1"})  # type: ignore[arg-type]
    got = saver.get_tuple(saved)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"seen": [1]}


@pytest.mark.parametrize(
    ("writes", "task_id", "task_path"),
    [
        ("seen", "task", ""),  # a str, not a list of (channel, value)
        ([("seen",)], "task", ""),
        ([("seen", 1, 2)], "task", ""),
        ([(7, 1)], "task", ""),
        ([1], "task", ""),
        ({"seen": 1}, "task", ""),
        ([("seen", 1)], None, ""),
        ([("seen", 1)], "task", None),
    ],
)
def test_malformed_writes_are_refused_before_the_thread_exists(
    saver: JournalSaver, writes: Any, task_id: Any, task_path: Any
) -> None:
    with pytest.raises(InvalidArgument):
        saver.put_writes(config("t", checkpoint_id="c1"), writes, task_id, task_path)
    assert saver.journal.sessions(status="all") == []


def test_a_first_write_too_large_for_the_journal_leaves_no_session(saver: JournalSaver) -> None:
    with pytest.raises(PayloadTooLarge):
        saver.put_writes(config("t", checkpoint_id="c1"), [("seen", list(range(300_000)))], "x")
    assert saver.journal.sessions(status="all") == []

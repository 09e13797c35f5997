"""`JournalSaver.prune` beside a running graph, and the input it refuses, on real SQLite files
and PostgreSQL. A put that lands between prune's read of the thread and its append must not be
hidden; a journal where a prune did hide the newest checkpoint (written before that was fixed)
still reads as its newest kept one."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentjournal import InvalidArgument
from agentjournal.events import LANGGRAPH_CHECKPOINT, LANGGRAPH_PRUNED, Event
from agentjournal.integrations.langgraph import JournalSaver
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "agent.db")
    else:
        with fresh_schema("lgprune") as schema:
            yield url_for(schema)


def config(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **extra}}


class Counter(TypedDict):
    seen: Annotated[list[int], operator.add]


def counter_graph(saver: Any) -> CompiledStateGraph[Any]:
    def step(state: Counter) -> dict[str, Any]:
        return {"seen": [len(state["seen"])]}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


def interpose_after_first_read(saver: JournalSaver, between: Callable[[], None]) -> None:
    """Run `between` once, right after the saver's next read of a whole session (prune's read
    of the thread), before the caller goes on with what it read."""
    real = saver.store.after
    pending = [between]

    def after(session_id: str, seq: int) -> Iterator[Event]:
        events = list(real(session_id, seq))
        if seq == 0 and pending:
            pending.pop()()
        return iter(events)

    saver.store.after = after  # type: ignore[method-assign]


def test_a_put_between_prunes_read_and_its_append_stays_the_latest(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        graph = counter_graph(saver)
        for _ in range(3):
            graph.invoke({"seen": []}, config("t"))
        raced: list[list[int]] = []
        interpose_after_first_read(
            saver, lambda: raced.append(graph.invoke({"seen": []}, config("t"))["seen"])
        )
        saver.prune(["t"], strategy="keep_latest")
        assert raced == [[0, 1, 2, 3]], "the graph ran while prune was at work"
        assert graph.get_state(config("t")).values["seen"] == [0, 1, 2, 3]
        kept = list(saver.list(config("t")))
        assert [k.checkpoint["channel_values"]["seen"] for k in kept] == [[0, 1, 2, 3]]
        assert graph.invoke({"seen": []}, config("t"))["seen"] == [0, 1, 2, 3, 4]
    with JournalSaver.from_conn_string(url) as again:
        assert counter_graph(again).get_state(config("t")).values["seen"] == [0, 1, 2, 3, 4]
        assert again.journal.verify().ok


def test_latest_skips_a_newest_checkpoint_that_a_prune_hid(url: str) -> None:
    """A journal written by a prune that raced a put: the prune kept an older checkpoint and
    hid the newer ones. The latest state is that kept checkpoint's, not an empty one."""
    with JournalSaver.from_conn_string(url) as saver:
        graph = counter_graph(saver)
        for _ in range(2):
            graph.invoke({"seen": []}, config("t"))
        saver.prune(["t"])
        (kept,) = list(saver.list(config("t")))
        kept_id = kept.config["configurable"]["checkpoint_id"]
        graph.invoke({"seen": []}, config("t"))  # newer checkpoints ...
        saver.journal.append("t", LANGGRAPH_PRUNED, {"keep": {"": kept_id}})  # ... then hidden
        events = saver.journal.events("t", limit=1000)
        newest = [e for e in events if e.type == LANGGRAPH_CHECKPOINT][-1]
        assert newest.payload["checkpoint_id"] != kept_id
        for reader in (saver, JournalSaver(saver.journal)):
            latest = reader.get_tuple(config("t"))
            assert latest is not None
            assert latest.config["configurable"]["checkpoint_id"] == kept_id
            assert counter_graph(reader).get_state(config("t")).values["seen"] == [0, 1]


@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
@pytest.mark.parametrize("thread_ids", ["t", b"t", 7, None])
def test_prune_refuses_thread_ids_that_are_not_a_collection_of_ids(
    tmp_path: Path, strategy: str, thread_ids: Any
) -> None:
    """A plain string is not a list of one thread: prune("thread-1") would prune (or, with
    "delete", purge) the threads "t", "h", "r", ... Refused before anything is read or written."""
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = counter_graph(saver)
        for thread_id in ("t", "thread-1"):
            for _ in range(2):
                graph.invoke({"seen": []}, config(thread_id))
        before = {s.session_id: s.last_seq for s in saver.journal.sessions()}
        with pytest.raises(InvalidArgument, match="thread_ids"):
            saver.prune(thread_ids, strategy=strategy)
        with pytest.raises(InvalidArgument, match="thread_ids"):
            saver.prune("thread-1", strategy=strategy)
        assert {s.session_id: s.last_seq for s in saver.journal.sessions()} == before
        assert len(list(saver.list(config("t")))) == 6


def test_prune_refuses_an_unknown_strategy_before_reading_the_threads(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        counter_graph(saver).invoke({"seen": []}, config("t"))
        before = saver.journal.get_session("t").last_seq
        with pytest.raises(InvalidArgument, match="strategy"):
            saver.prune(["t"], strategy="keep_none")
        with pytest.raises(InvalidArgument, match="strategy"):
            saver.prune("t", strategy="keep_none")
        assert saver.journal.get_session("t").last_seq == before


# -- DeltaChannel -------------------------------------------------------------------------------


def concat(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Log(TypedDict):
    items: Annotated[list[str], DeltaChannel(concat)]


def delta_graph(saver: Any) -> CompiledStateGraph[Any]:
    """A DeltaChannel stores no value at most checkpoints: LangGraph rebuilds it from the
    writes of the checkpoints before, found by walking the parents."""

    def step(state: Log) -> dict[str, Any]:
        return {"items": [f"i{len(state['items'])}"]}

    builder = StateGraph(Log)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


def test_keep_latest_refuses_a_thread_using_a_delta_channel_and_prunes_nothing(url: str) -> None:
    """Hiding the checkpoints before the latest would empty the DeltaChannel's state. As
    PostgresSaver: NotImplementedError, and no thread of the batch is pruned."""
    with JournalSaver.from_conn_string(url) as saver:
        graph, plain = delta_graph(saver), counter_graph(saver)
        for _ in range(3):
            graph.invoke({"items": []}, config("delta"))
            plain.invoke({"seen": []}, config("plain"))
        before = {s.session_id: s.last_seq for s in saver.journal.sessions()}
        with pytest.raises(NotImplementedError, match="DeltaChannel: delta"):
            saver.prune(["plain", "delta"])
        assert {s.session_id: s.last_seq for s in saver.journal.sessions()} == before
        assert graph.get_state(config("delta")).values["items"] == ["i0", "i1", "i2"]
        assert len(list(saver.list(config("plain")))) == 9
        saver.prune(["plain"])
        assert len(list(saver.list(config("plain")))) == 1
        saver.prune(["delta"], strategy="delete")
        assert saver.get_tuple(config("delta")) is None


class XorCipher:
    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ 0x5A for b in ciphertext)


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_delta_snapshot_blob_is_told_from_other_values(tmp_path: Path, encrypted: bool) -> None:
    """A thread whose DeltaChannel left no counters in any metadata still has snapshot blobs:
    every size of msgpack ext header, plain or encrypted, is found; other values are not."""
    serde = EncryptedSerializer(XorCipher()) if encrypted else JsonPlusSerializer()
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db"), serde=serde) as saver:
        for size in (0, 1, 3, 14, 300, 70_000):
            snapshot = _DeltaSnapshot(["x" * 3] * size)
            assert saver._is_delta_snapshot(serde.dumps_typed(snapshot)), size
            assert not saver._is_delta_snapshot(serde.dumps_typed(["x" * 3] * size)), size
        for value in (7, "\x07", b"\xd4\x07", {"a": 1}, None, 3.5):
            assert not saver._is_delta_snapshot(serde.dumps_typed(value)), value

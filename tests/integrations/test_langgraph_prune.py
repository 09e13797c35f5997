"""`JournalSaver.prune` beside a running graph, and the input it refuses, on real SQLite files
and PostgreSQL. A put that lands between prune's read of the thread and its append must not be
hidden; a journal where a prune did hide the newest checkpoint (written before that was fixed)
still reads as its newest kept one."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.runnables import RunnableConfig
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

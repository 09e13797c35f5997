"""LangGraph's own checkpointer suite (`langgraph-checkpoint-conformance`) on both savers and both
backends: every base capability passes, and so does every extended capability whose method the
saver overrides (`copy_thread`, `prune`; `delete_for_runs` is not offered, see
docs/integrations.md). The suite drives the async methods: `AsyncJournalSaver`'s run on the
journal's worker threads, `JournalSaver`'s run its sync methods on a thread, so both are covered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.report import CapabilityReport

from agentjournal.integrations.langgraph import AsyncJournalSaver, JournalSaver
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

Factory = Callable[[], AsyncIterator[BaseCheckpointSaver[str]]]


def sqlite_urls(tmp_path: Path) -> Callable[[], str]:
    count = iter(range(1_000))
    return lambda: str(tmp_path / f"conformance-{next(count)}.db")


def saver_factory(kind: str, url: Callable[[], str]) -> Factory:
    async def factory() -> AsyncIterator[BaseCheckpointSaver[str]]:
        if kind == "async":
            async with AsyncJournalSaver.from_conn_string(url()) as saver:
                yield saver
        else:
            with JournalSaver.from_conn_string(url()) as sync_saver:
                yield sync_saver

    return factory


def run_suite(name: str, factory: Factory) -> CapabilityReport:
    return asyncio.run(validate(checkpointer_test(name=name)(factory)))


def assert_passes(report: CapabilityReport, saver_type: type[BaseCheckpointSaver[str]]) -> None:
    failures = {
        cap: [str(f)[:2000] for f in (result.failures or [])]
        for cap, result in report.results.items()
        if result.passed is False
    }
    assert not failures, failures
    overridden = {
        cap
        for cap in Capability
        if getattr(saver_type, _METHOD[cap]) is not getattr(BaseCheckpointSaver, _METHOD[cap])
    }
    assert overridden >= BASE_CAPABILITIES
    assert overridden & EXTENDED_CAPABILITIES == {Capability.COPY_THREAD, Capability.PRUNE}
    for cap in overridden:
        result = report.results[cap.value]
        assert result.detected, cap
        assert result.passed is True, (cap, result)
        assert result.tests_passed > 0, (cap, result)
        assert result.tests_failed == 0, (cap, result)


_METHOD = {
    Capability.PUT: "aput",
    Capability.PUT_WRITES: "aput_writes",
    Capability.GET_TUPLE: "aget_tuple",
    Capability.LIST: "alist",
    Capability.DELETE_THREAD: "adelete_thread",
    Capability.DELETE_FOR_RUNS: "adelete_for_runs",
    Capability.COPY_THREAD: "acopy_thread",
    Capability.PRUNE: "aprune",
}


@pytest.mark.parametrize(
    ("kind", "saver_type"), [("async", AsyncJournalSaver), ("sync", JournalSaver)]
)
def test_conformance_on_sqlite(
    tmp_path: Path, kind: str, saver_type: type[BaseCheckpointSaver[str]]
) -> None:
    report = run_suite(
        f"{saver_type.__name__} (SQLite)", saver_factory(kind, sqlite_urls(tmp_path))
    )
    assert_passes(report, saver_type)


@pytest.mark.parametrize(
    ("kind", "saver_type"), [("async", AsyncJournalSaver), ("sync", JournalSaver)]
)
def test_conformance_on_postgres(kind: str, saver_type: type[BaseCheckpointSaver[str]]) -> None:
    with fresh_schema("lgconf") as schema:
        report = run_suite(
            f"{saver_type.__name__} (PostgreSQL)", saver_factory(kind, lambda: url_for(schema))
        )
    assert_passes(report, saver_type)

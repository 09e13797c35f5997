"""PostgreSQL only: a search picks its way (walk the newest index rows, or the GIN index) from
the planner's statistics, and finds the same hits whichever way it goes."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from agentjournal import Journal, NewEvent
from agentjournal.backends.postgres import PostgresStorage
from agentjournal.backends.postgres_search import MAX_WALK, RECENT_ROWS, choose_plan, longer_walk
from agentjournal.search import WINDOW
from postgres_fixtures import HOST, OWNER, fresh_schema, url_for

EVENTS = 3 * WINDOW  # more than a walk of a word in every event reads (2 × the window)
RARE_AT = 100  # the one event with the rare word: far older than any walk of the common one


@pytest.fixture
def journal() -> Iterator[tuple[Journal, str]]:
    with (
        fresh_schema("pgsearch") as schema,
        Journal(PostgresStorage(url_for(schema), "normal")) as journal,
    ):
        sid = journal.create_session("plans").session_id
        texts = [f"everywhere {'walrus ' if n == RARE_AT else ''}#{n}" for n in range(EVENTS)]
        for start in range(0, EVENTS, 500):
            batch = texts[start : start + 500]
            journal.append_many(sid, [NewEvent("user_message", {"content": t}) for t in batch])
        yield journal, schema


def analyze(schema: str) -> None:
    # As the tables' owner: PostgreSQL lets only the owner ANALYZE, which autovacuum does in
    # a deployment; the application role only reads the statistics.
    with psycopg.connect(f"postgresql://{OWNER}@{HOST}", autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("ANALYZE search_index")


def searched(journal: Journal, query: str) -> list[int]:
    return [hit.seq for hit in journal.search(query, limit=20).hits]


def plans(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentjournal.postgres"]


def test_after_analyze_a_word_in_every_event_walks_and_a_word_in_one_goes_to_gin(
    journal: tuple[Journal, str], caplog: pytest.LogCaptureFixture
) -> None:
    j, schema = journal
    analyze(schema)
    caplog.set_level(logging.DEBUG, logger="agentjournal.postgres")
    # seq 1 is the session's creation; the message numbered n is seq n + 2.
    assert searched(j, "everywhere") == list(range(EVENTS + 1, EVENTS - 19, -1))
    (common,) = plans(caplog)
    walked = re.search(r"estimated 100.0% of rows: walk \(walk (\d+) rows\)", common)
    assert walked
    assert 2 * WINDOW <= int(walked[1]) < EVENTS  # a walk sized to the window
    caplog.clear()
    assert searched(j, "walrus") == [RARE_AT + 2]
    (rare,) = plans(caplog)
    assert ": GIN (walk 0 rows)" in rare
    caplog.clear()
    # The planner's estimate for a prefix is no sum of its words': a prefix takes the fixed walk.
    assert searched(j, "everywh*") == list(range(EVENTS + 1, EVENTS - 19, -1))
    (prefix,) = plans(caplog)
    assert f"no estimate: a fixed walk, then GIN (walk {RECENT_ROWS} rows)" in prefix


def test_without_statistics_a_search_walks_a_fixed_number_of_rows_then_asks_gin(
    journal: tuple[Journal, str], caplog: pytest.LogCaptureFixture
) -> None:
    j, _ = journal
    caplog.set_level(logging.DEBUG, logger="agentjournal.postgres")
    assert searched(j, "everywhere") == list(range(EVENTS + 1, EVENTS - 19, -1))
    assert searched(j, "walrus") == [RARE_AT + 2]
    common, rare, rare_fallback = plans(caplog)
    assert f"no estimate: a fixed walk, then GIN (walk {RECENT_ROWS} rows)" in common
    assert "no estimate" in rare
    assert f"a walk of {RECENT_ROWS} found 1, next 0" in rare_fallback


def test_the_walk_is_sized_to_the_window_and_the_estimate() -> None:
    assert choose_plan(None, WINDOW).walk == RECENT_ROWS
    assert choose_plan(0.5, WINDOW).walk == 4 * WINDOW
    assert choose_plan(0.03, WINDOW).walk == 66_667
    assert choose_plan(0.01, WINDOW).walk == MAX_WALK  # the most a walk reads
    assert choose_plan(0.005, WINDOW).walk == 0  # too rare for a walk: GIN
    assert choose_plan(0.0, WINDOW).walk == 0


def test_a_walk_that_found_too_few_walks_again_by_the_rate_it_saw_or_asks_gin() -> None:
    assert longer_walk(RECENT_ROWS, 600, WINDOW) == 66_667  # 3 %: a walk of 2 x the window
    assert longer_walk(RECENT_ROWS, 50, WINDOW) == 0  # 0.25 %: past MAX_WALK, GIN
    assert longer_walk(RECENT_ROWS, 0, WINDOW) == 0
    assert longer_walk(RECENT_ROWS, 999, WINDOW) == 40_041  # just short: twice as far

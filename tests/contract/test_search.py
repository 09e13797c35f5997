"""Full-text search (`Journal.search`) on every backend: what is found, how hits look, filters,
pages, hostile queries, tenants, and the index following purge, fork and verify."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentjournal import InvalidArgument, Journal
from agentjournal.search import WINDOW
from helpers.contract import call, msg, result, seed
from helpers.raw_sql import RawSQL


def found(journal: Journal, query: str, **filters: Any) -> list[tuple[str, int]]:
    return [(h.session_id, h.seq) for h in journal.search(query, limit=100, **filters).hits]


def test_words_of_messages_calls_results_titles_and_metadata_are_found(journal: Journal) -> None:
    sid = journal.create_session("Refund desk", metadata={"customer": "Acme Corp"}).session_id
    journal.append_many(
        sid,
        [
            msg("user_message", "Where is my order 1234?"),
            call("c1", name="lookup_order", arguments=json.dumps({"order_id": "1234"})),
            result("c1", "Order 1234 shipped via Parcelway"),
            msg("assistant_message", "It shipped yesterday."),
        ],
    )
    assert sorted(found(journal, "1234")) == [(sid, 2), (sid, 3), (sid, 4)]
    assert found(journal, "lookup_order") == [(sid, 3)]
    assert found(journal, "parcelway") == [(sid, 4)]
    assert found(journal, "refund") == [(sid, 1)]
    assert found(journal, "acme") == [(sid, 1)]
    assert found(journal, "yesterday shipped") == [(sid, 5)]
    assert found(journal, "shipped nowhere") == []


def test_a_hit_names_its_session_and_marks_the_words_in_its_snippet(journal: Journal) -> None:
    sid = journal.create_session("Support").session_id
    journal.append(sid, "user_message", {"content": "My ORDER 1234 never arrived"})
    (hit,) = journal.search("order").hits
    assert (hit.session_id, hit.seq, hit.type, hit.session_title) == (
        sid,
        2,
        "user_message",
        "Support",
    )
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["ORDER"]
    assert hit.score >= 0
    assert hit.to_dict()["highlights"] == [[3, 8]]


def test_chinese_words_of_two_characters_and_one_are_found(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "我的订单数量"})
    assert (sid, 8) in found(journal, "订单")
    assert (sid, 8) in found(journal, "订")
    assert (sid, 8) in found(journal, "量")
    assert (sid, 8) in found(journal, "订单数量")
    assert found(journal, "单订") == []
    hit = next(h for h in journal.search("订单").hits if h.seq == 8)
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["订单"]


HOSTILE = [
    '"',
    '""',
    "'",
    "order\"'",
    "(",
    "order)",
    "*",
    "order*",
    "o*",
    "NEAR(order 1234)",
    "order NEAR 1234",
    "order AND",
    "OR",
    "NOT order",
    "-order",
    "^order",
    "col:order",
    "content:order",
    "{content}: order",
    "order + 1234",
    "%_",
    "\\",
    "order; DROP TABLE events;--",
    "x" * 10_000,
    "order " * 2_000,
    "",
    "   ",
    "\t\n",
    "\u3000",
    "🙂",
    '订单"',
    "a" * 500,
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_give_a_clear_error_or_a_correct_result(
    journal: Journal, query: str
) -> None:
    sid = journal.create_session("t").session_id
    journal.append(sid, "user_message", {"content": "order 1234 near the col"})
    try:
        page = journal.search(query)
    except InvalidArgument as exc:
        message = str(exc)
        page = None
    if page is None:
        assert "query" in message
        return
    for hit in page.hits:
        assert hit.session_id == sid


def test_search_sees_only_its_tenant(journal: Journal) -> None:
    other = journal.for_tenant("b")
    theirs = other.create_session("secret plans").session_id
    other.append(theirs, "user_message", {"content": "zanzibar treasure"})
    mine = journal.create_session("mine").session_id
    journal.append(mine, "user_message", {"content": "zanzibar holiday"})
    assert found(journal, "zanzibar") == [(mine, 2)]
    assert found(journal, "treasure") == []
    assert found(other, "zanzibar") == [(theirs, 2)]
    assert found(other, "holiday") == []


def test_filters_by_session_status_type_and_time(journal: Journal) -> None:
    kept = journal.create_session("kept").session_id
    gone = journal.create_session("gone").session_id
    first = journal.append(kept, "user_message", {"content": "walrus"})
    journal.append(kept, "assistant_message", {"content": "walrus too"})
    journal.append(gone, "user_message", {"content": "walrus"})
    journal.delete_session(gone)
    assert sorted(found(journal, "walrus")) == [(kept, 2), (kept, 3)]
    assert (gone, 2) in found(journal, "walrus", session_status="all")
    assert found(journal, "walrus", session_status="deleted") == [(gone, 2)]
    assert found(journal, "walrus", types=["assistant_message"]) == [(kept, 3)]
    assert found(journal, "walrus", until=first.created_at) == []
    assert (kept, 2) in found(journal, "walrus", since=first.created_at)
    for bad in (
        {"session_status": "gone"},
        {"types": "user_message"},
        {"types": []},
        {"types": ["nope"]},
        {"since": -1},
        {"limit": 0},
        {"limit": 101},
        {"cursor": "nonsense"},
        {"cursor": "1.99999"},
    ):
        with pytest.raises(InvalidArgument):
            journal.search("walrus", **bad)


def test_pages_walk_every_hit_once(journal: Journal) -> None:
    sid = journal.create_session("pages").session_id
    journal.append_many(
        sid, [msg("user_message", f"pelican number {n}" + " pelican" * (n % 3)) for n in range(25)]
    )
    seen: list[int] = []
    cursor = None
    while True:
        page = journal.search("pelican", limit=7, cursor=cursor)
        seen += [h.seq for h in page.hits]
        scores = [h.score for h in page.hits]
        assert scores == sorted(scores, reverse=True)
        cursor = page.next_cursor
        if cursor is None:
            break
        journal.append(sid, "user_message", {"content": "pelican arriving later"})
    assert sorted(seen) == list(range(2, 27))


def test_pages_go_on_past_one_window(journal: Journal) -> None:
    sid = journal.create_session("many").session_id
    journal.append_many(sid, [msg("user_message", f"heron {n}") for n in range(WINDOW + 5)])
    seen: set[int] = set()
    cursor = None
    pages = 0
    while True:
        page = journal.search("heron", limit=100, cursor=cursor)
        seen |= {h.seq for h in page.hits}
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == set(range(2, WINDOW + 7))
    assert pages == 11  # ten pages of the newest window, one of the next


def test_purge_takes_the_session_out_of_the_index(journal: Journal) -> None:
    gone = journal.create_session("gone").session_id
    journal.append(gone, "user_message", {"content": "quokka"})
    kept = journal.create_session("kept").session_id
    journal.append(kept, "user_message", {"content": "quokka"})
    journal.purge_session(gone)
    assert found(journal, "quokka") == [(kept, 2)]
    assert journal.verify().ok


def test_a_fork_is_searchable_with_its_copies(journal: Journal) -> None:
    sid = journal.create_session("parent").session_id
    journal.append(sid, "user_message", {"content": "narwhal"})
    fork = journal.fork(sid).session_id
    assert sorted(found(journal, "narwhal")) == sorted([(sid, 2), (fork, 2)])
    assert journal.verify().ok


def test_verify_reports_a_missing_index_row_and_rebuild_restores_it(
    journal: Journal, raw: RawSQL
) -> None:
    sid = journal.create_session("checked").session_id
    event = journal.append(sid, "user_message", {"content": "axolotl"})
    assert found(journal, "axolotl") == [(sid, 2)]  # the index is complete up to here
    if raw.backend == "sqlite":
        raw.execute(
            "INSERT INTO search_index (search_index, rowid, body) VALUES ('delete', ?, ?)",
            (event.event_id, "axolotl"),
        )
    else:
        raw.execute("DELETE FROM search_index WHERE event_id = ?", (event.event_id,))
    assert found(journal, "axolotl") == []
    report = journal.verify()
    assert [(d.table, d.key, d.stored, d.expected) for d in report.differences] == [
        ("search_index", f"{sid}/2", None, "row")
    ]
    repaired = journal.verify(rebuild=True)
    assert "search_index" in repaired.rebuilt
    assert journal.verify().ok
    assert found(journal, "axolotl") == [(sid, 2)]


def test_verify_reports_index_rows_of_events_that_do_not_exist(
    journal: Journal, raw: RawSQL
) -> None:
    sid = journal.create_session("real").session_id
    journal.append(sid, "user_message", {"content": "okapi"})
    assert found(journal, "okapi") == [(sid, 2)]
    if raw.backend == "sqlite":
        raw.execute("INSERT INTO search_index (rowid, body) VALUES (999999, 'okapi ghost')")
    else:
        raw.execute(
            "INSERT INTO search_index (event_id, tenant, session_id, terms)"
            " VALUES (999999, 'default', ?, to_tsvector('simple', 'okapi ghost'))",
            (sid,),
        )
    assert found(journal, "okapi") == [(sid, 2)]  # a hit needs its event
    assert journal.verify().integrity == ["search index: 1 rows of events that do not exist"]


def test_reindex_search_reports_the_events_read_so_far(journal: Journal) -> None:
    sid = journal.create_session("reindexed").session_id
    journal.append_many(sid, [msg("user_message", f"pangolin {n}") for n in range(5)])
    journal.for_tenant("b").create_session("another tenant's, reindexed too")
    counts: list[int] = []
    assert journal.reindex_search(progress=counts.append) == 1 + 5 + 1
    assert counts == [7]  # one batch holds them all
    assert [hit.seq for hit in journal.search("pangolin", limit=10).hits] == [6, 5, 4, 3, 2]

"""The inspector on a session of 100,000 events: it opens at the newest turn, reads older pages as
the user scrolls up, opens around a seq from the route and from the slider, takes live events
while the user is scrolled up, and never holds more than a window of items, whatever the length.

The session (built with `append_many` at durability="normal" in a few seconds) is turns of four
events: seq 4t+2 is "question t", 4t+3 the call, 4t+4 its result "result t", 4t+5 "answer t"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from browsing import Browsing
from playwright.sync_api import Page, expect
from scenes import long_session

from agentjournal import Journal
from server.conftest import RunningServer

EVENTS = 100_000
MAX_ITEMS = 600  # timeline.js MAX_EVENTS: no more items than events kept


@pytest.fixture(scope="module")
def long_id(server: RunningServer) -> Iterator[str]:
    with Journal.open(server.db_path, durability="normal") as journal:
        yield long_session(journal, EVENTS)


def last_seq(inspector: Browsing, session_id: str) -> int:
    with inspector.journal() as journal:
        return journal.get_session(session_id).last_seq


def item_count(page: Page) -> int:
    count: int = page.locator("#timeline > li").count()
    return count


def first_seq(page: Page) -> int:
    seq: int = page.evaluate("Number(document.querySelector('#timeline > li')?.dataset.seq ?? 0)")
    return seq


def event_reads(inspector: Browsing) -> list[dict[str, list[str]]]:
    """The query of each page of events the page asked for."""
    urls = [urlsplit(r.url) for r in inspector.requests]
    return [parse_qs(u.query) for u in urls if u.path.endswith("/events")]


# The first user message on the screen (assistant turns at the window's start may grow as older
# events join them; messages stay as they are), and where it is.
USER_ON_SCREEN = """() => {
    const item = [...document.querySelectorAll('#timeline > li.user')]
        .find((li) => li.getBoundingClientRect().bottom > 0);
    return [item.dataset.seq, item.getBoundingClientRect().top];
}"""


def scroll_up_once(page: Page) -> None:
    """Scrolls to the top of what is loaded, waits until an older page is shown, and checks that
    the view stayed on what the user was reading."""
    before = first_seq(page)
    # One script: the scroll and the measure, before any page can load in between.
    seq, top = page.evaluate(f"window.scrollTo(0, 0), ({USER_ON_SCREEN})()")
    page.wait_for_function(
        "(before) => Number(document.querySelector('#timeline > li').dataset.seq) < before",
        arg=before,
    )
    after = page.evaluate(
        "(seq) => document.querySelector(`#timeline > li[data-seq='${seq}']`)"
        ".getBoundingClientRect().top",
        seq,
    )
    assert abs(after - top) <= 1, (seq, top, after)


def test_a_long_session_opens_at_its_newest_turn(inspector: Browsing, long_id: str) -> None:
    last = last_seq(inspector, long_id)
    page = inspector.open(long_id)
    expect(page.locator("#live-state")).to_have_text("Live")
    expect(page.locator("#travel-output")).to_have_text(f"event {last} of {last} · live")
    newest = page.locator("#timeline > li").last
    expect(newest).to_contain_text(f"#{last}")  # its seq, or its tool call's "#call → #result"
    expect(newest).to_be_in_viewport()
    assert item_count(page) <= MAX_ITEMS
    # One page of the newest events: nothing was read from the start of the session.
    reads = event_reads(inspector)
    assert reads[0] == {"last": ["200"]}, reads
    assert all("after" not in q or int(q["after"][0]) > 1000 for q in reads), reads


def test_scrolling_up_reads_older_pages_and_keeps_the_dom_bounded(
    inspector: Browsing, long_id: str
) -> None:
    page = inspector.open(long_id)
    expect(page.locator("#live-state")).to_have_text("Live")
    for _ in range(6):
        scroll_up_once(page)
        assert item_count(page) <= MAX_ITEMS
    # 200 events a page: six pages up, the window holds 600 events, the newest dropped.
    assert first_seq(page) < last_seq(inspector, long_id) - 6 * 200 + 50
    expect(page.locator("#timeline-end")).to_contain_text("scroll down to load them")
    heap = page.evaluate("performance.memory.usedJSHeapSize")
    assert heap < 100 * 2**20, heap


def test_the_route_opens_around_a_seq_and_scrolling_up_reaches_seq_2(
    inspector: Browsing, long_id: str
) -> None:
    page = inspector.page
    page.goto(f"{inspector.server.base_url}/#/sessions/{long_id}/seq/50001")
    target = page.locator("#timeline > li.target")
    expect(target).to_have_count(1)
    expect(target).to_contain_text("answer 12499")  # seq 50001 = 4 * 12499 + 5
    expect(target).to_be_in_viewport()
    assert item_count(page) <= MAX_ITEMS
    assert {"around": ["50001"], "limit": ["200"]} in event_reads(inspector)
    # The search's links lead to a seq near the start as well: from there, up to seq 2.
    page.evaluate("location.hash = location.hash.replace('/seq/50001', '/seq/700')")
    # 700 is the result of turn 174's call (699), shown under it in the assistant turn.
    expect(page.locator("#timeline > li.target")).to_contain_text("#699 → #700")
    for _ in range(10):  # bounded: 200 events a page
        if first_seq(page) <= 2:
            break
        scroll_up_once(page)
    expect(page.locator("#timeline li[data-seq='2']")).to_contain_text("question 0")
    expect(page.locator("#timeline-start")).to_have_text("")
    assert item_count(page) <= MAX_ITEMS


def test_time_travel_to_an_old_event_and_fork_there(inspector: Browsing, long_id: str) -> None:
    last = last_seq(inspector, long_id)
    page = inspector.open(long_id)
    expect(page.locator("#live-state")).to_have_text("Live")
    page.get_by_label("Time travel").fill("1234")
    expect(page.locator("#travel-output")).to_have_text(f"event 1234 of {last}")
    # 1234 is "question 308" (4 * 308 + 2): the last thing shown.
    shown = page.locator("#timeline > li")
    expect(shown.last).to_contain_text("question 308")
    expect(page.locator("#timeline")).not_to_contain_text("answer 308")
    expect(page.locator("#timeline-end")).to_contain_text(f"{last - 1234} later events hidden")
    assert item_count(page) <= MAX_ITEMS
    page.get_by_role("button", name="Fork here").click()
    expect(page).not_to_have_url(f"{inspector.server.base_url}/#/sessions/{long_id}")
    expect(page.locator("#travel-output")).to_have_text("event 1235 of 1235 · live")
    expect(page.locator("#timeline > li").last).to_contain_text(f"Forked from {long_id}")


def append_reply(server: RunningServer, session_id: str, content: str) -> Any:
    response = httpx.post(
        f"{server.base_url}/v1/sessions/{session_id}/events",
        json={"type": "assistant_message", "payload": {"content": content}},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


def test_live_events_arrive_at_the_bottom_without_moving_a_user_who_scrolled_up(
    inspector: Browsing, long_id: str
) -> None:
    page = inspector.open(long_id)
    expect(page.locator("#live-state")).to_have_text("Live")
    page.evaluate("window.scrollBy(0, -1500)")  # reading a little above the newest turn
    where = """() => {
        const item = [...document.querySelectorAll('#timeline > li')]
            .find((li) => li.getBoundingClientRect().bottom > 0);
        return [item.dataset.seq, item.getBoundingClientRect().top, window.scrollY];
    }"""
    before = page.evaluate(where)
    event = append_reply(inspector.server, long_id, "a reply while you read")
    seq = event["seq"]
    expect(page.locator("#travel-output")).to_have_text(f"event {seq} of {seq} · live")
    expect(page.locator("#timeline")).to_contain_text("a reply while you read")
    assert page.evaluate(where) == before, "the view did not move"
    assert item_count(page) <= MAX_ITEMS
    # Scrolled far up (the window no longer holds the newest events), a live event waits below.
    for _ in range(4):
        scroll_up_once(page)
    event = append_reply(inspector.server, long_id, "a reply far below")
    seq = event["seq"]
    expect(page.locator("#travel-output")).to_have_text(f"event {seq} of {seq} · live")
    expect(page.locator("#timeline")).not_to_contain_text("a reply far below")
    for _ in range(10):  # bounded: down a page at a time until the newest is loaded
        if page.locator("#timeline").filter(has_text="a reply far below").count():
            break
        shown = page.evaluate("document.querySelector('#timeline > li:last-child').dataset.seq")
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        page.wait_for_function(
            "(seq) => document.querySelector('#timeline > li:last-child').dataset.seq !== seq",
            arg=shown,
        )
    expect(page.locator("#timeline")).to_contain_text("a reply far below")
    assert item_count(page) <= MAX_ITEMS

"""The inspector's search box (search.js) in chromium, against a real server: it lists hits with
their session title, seq and marked words, a click opens the session at the hit's event, and a
query with no words says so instead of failing."""

from __future__ import annotations

import secrets

from browsing import Browsing
from playwright.sync_api import expect

from agentjournal import NewEvent


def test_a_hit_shows_its_session_and_marked_words_and_opens_at_its_event(
    inspector: Browsing,
) -> None:
    word = f"albatross{secrets.token_hex(3)}"
    with inspector.journal() as journal:
        other = journal.create_session("Somewhere else").session_id
        journal.append(other, "user_message", {"content": "nothing to see"})
        sid = journal.create_session("Seabirds").session_id
        filler = [NewEvent("user_message", {"content": f"filler line {n}"}) for n in range(600)]
        journal.append_many(sid, filler[:300])
        hit = journal.append(sid, "user_message", {"content": f"I spotted an {word} at sea"})
        journal.append_many(sid, filler[300:])
    page = inspector.open()
    page.locator("#search-query").fill(word.upper())
    page.locator("#search-query").press("Enter")

    hits = page.locator("#search-hits li")
    expect(hits).to_have_count(1)
    expect(hits.first).to_contain_text("Seabirds")
    expect(hits.first).to_contain_text(f"#{hit.seq}")
    expect(hits.first.locator("mark")).to_have_text(word)
    expect(page.locator("#search-status")).to_contain_text("1 event")

    hits.first.locator("a").click()
    expect(page).to_have_url(f"{inspector.server.base_url}/#/sessions/{sid}/seq/{hit.seq}")
    expect(page.locator("#search-results")).to_be_hidden()
    target = page.locator(f'#timeline li[data-seq="{hit.seq}"]')
    expect(target).to_contain_text(word)
    expect(target).to_be_in_viewport()


def test_a_query_without_words_is_explained_not_failed(inspector: Browsing) -> None:
    page = inspector.open()
    page.locator("#search-query").fill('"()*')
    page.locator("#search-query").press("Enter")
    expect(page.locator("#search-status")).to_contain_text("no words")
    expect(page.locator("#search-hits li")).to_have_count(0)
    page.locator("#search-query").press("Escape")
    expect(page.locator("#search-results")).to_be_hidden()

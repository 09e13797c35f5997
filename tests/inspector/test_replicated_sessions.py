"""On a central journal the inspector names the source of each replicated session: in the
session list, in the open session's facts and on its search hits; a session written there
directly names none."""

from __future__ import annotations

import secrets
from pathlib import Path

from browsing import Browsing
from playwright.sync_api import expect

from agentjournal import Journal, replicate


def test_a_replicated_session_names_its_source_in_list_facts_and_search(
    inspector: Browsing, tmp_path: Path
) -> None:
    word = f"kestrel{secrets.token_hex(3)}"
    with Journal.open(tmp_path / "laptop.db") as laptop:
        edge = laptop.create_session("From the laptop").session_id
        laptop.append(edge, "user_message", {"content": f"a {word} landed"})
        source_id = laptop.source_id()
        replicate(laptop, inspector.server.db_path)
    with inspector.journal() as journal:
        local = journal.create_session("Written centrally").session_id

    page = inspector.open()
    edge_row = page.locator("#session-list a").filter(has_text="From the laptop")
    expect(edge_row.locator(".session-source")).to_have_text(f"from {source_id}")
    local_row = page.locator("#session-list a").filter(has_text="Written centrally")
    expect(local_row).to_have_count(1)
    expect(local_row.locator(".session-source")).to_have_count(0)

    edge_row.click()
    facts = page.locator("#session-facts")
    expect(facts).to_contain_text("Replicated from")
    expect(facts).to_contain_text(source_id)

    page.locator("#search-query").fill(word)
    page.locator("#search-query").press("Enter")
    hits = page.locator("#search-hits li")
    expect(hits).to_have_count(1)
    expect(hits.first.locator(".search-hit-source")).to_contain_text(source_id)

    inspector.open(local)
    expect(page.locator("#session-title")).to_have_text("Written centrally")
    expect(page.locator("#session-facts")).not_to_contain_text("Replicated from")

"""The web inspector at `/`, in Debian's headless chromium, over a real `agentjournal serve` on a
SQLite file. Other clients (httpx, or the library on the same file) change the journal while
the page is open; the page must show it without a reload."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import secrets
import time
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from browsing import Browsing, BrowsingFactory
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, Route, expect
from scenes import GREETING, ORDER_REPLY, order_session

from agentjournal import Journal
from server.conftest import RunningServer, auth, launch

EXTERNAL_URL = re.compile(r"https?://|[\"'(=]\s*//[^/\s]", re.IGNORECASE)
MODULE_IMPORT = re.compile(r"""from\s+["']\./([\w.-]+)["']""")
SVG_NAMESPACE = 'xmlns="http://www.w3.org/2000/svg"'  # a name, never fetched
SERVED_AT_ROOT = {"favicon.ico": "favicon.svg"}  # path: the file in static/
KEY_STORAGE = "agentjournal.apiKey"

# Keeps count of the abort listeners on each AbortSignal: window.__abortListeners() is the most
# any one of them has now.
COUNT_ABORT_LISTENERS = """(() => {
    const live = new Map();
    const { addEventListener: add, removeEventListener: remove } = EventTarget.prototype;
    EventTarget.prototype.addEventListener = function (type, listener, options) {
        if (this instanceof AbortSignal && type === "abort") {
            if (!live.has(this)) live.set(this, new Set());
            live.get(this).add(listener);
        }
        return add.call(this, type, listener, options);
    };
    EventTarget.prototype.removeEventListener = function (type, listener, options) {
        if (this instanceof AbortSignal && type === "abort") live.get(this)?.delete(listener);
        return remove.call(this, type, listener, options);
    };
    window.__abortListeners = () => Math.max(0, ...[...live.values()].map((s) => s.size));
})()"""

# Every text the announcer is given, in window.__announced.
RECORD_ANNOUNCEMENTS = """() => {
    window.__announced = [];
    const announcer = document.getElementById("announcer");
    new MutationObserver(() => window.__announced.push(announcer.textContent))
        .observe(announcer, { childList: true, characterData: true, subtree: true });
}"""

# Opens `hash` as soon as the timeline shows `text`: sooner than a test could click.
SWITCH_WHEN_SHOWN = """([text, hash]) => {
    const list = document.getElementById("timeline");
    const observer = new MutationObserver(() => {
        if (!list.textContent.includes(text)) return;
        observer.disconnect();
        location.hash = hash;
    });
    observer.observe(list, { childList: true, characterData: true, subtree: true });
}"""


def api_events(server: RunningServer, session_id: str, key: str | None = None) -> list[Any]:
    headers = auth(key) if key else {}
    response = httpx.get(
        f"{server.base_url}/v1/sessions/{session_id}/events", headers=headers, timeout=10
    )
    response.raise_for_status()
    events: list[Any] = response.json()["events"]
    return events


def append(server: RunningServer, session_id: str, type_: str, payload: dict[str, Any]) -> Any:
    """Another client's append, over HTTP."""
    response = httpx.post(
        f"{server.base_url}/v1/sessions/{session_id}/events",
        json={"type": type_, "payload": payload},
        headers=server.headers("acme") if server.keys else {},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


def post(server: RunningServer, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{server.base_url}{path}", json=body, timeout=10)
    response.raise_for_status()
    return response.json()


def timeline(page: Page) -> Locator:
    return page.locator("#timeline")


def expect_live(page: Page) -> None:
    expect(page.locator("#live-state")).to_have_text("Live")


def accessible_description(page: Page, role: str, name: str) -> str | None:
    """The description chromium itself computes (Playwright's own computation leaves out an
    <output>'s text)."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        cdp.detach()
    found = [
        n.get("description", {}).get("value")
        for n in nodes
        if n.get("role", {}).get("value") == role and n.get("name", {}).get("value") == name
    ]
    assert len(found) == 1, found
    description: str | None = found[0]
    return description


def new_order_session(inspector: Browsing, **options: Any) -> str:
    with inspector.journal() as journal:
        return order_session(journal, **options)


# -- served by the service, nothing from elsewhere --------------------------------------------


def test_the_page_and_its_files_are_served_with_no_external_url(server: RunningServer) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        page = http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy, policy
        assert "connect-src 'self'" in policy, policy
        linked = re.findall(r"""(?:src|href)=["']([^"'#]+)["']""", page.text)
        preloaded = re.findall(r'rel="modulepreload" href="([^"]+)"', page.text)
        loaded = sorted(set(linked) - set(preloaded))
        assert loaded == ["favicon.ico", "inspector/inspector.css", "inspector/inspector.js"]
        texts = {"index.html": page.text}
        queue = list(linked)
        while queue:
            path = queue.pop()
            response = http.get(f"/{path}")
            assert response.status_code == 200, path
            shipped_as = SERVED_AT_ROOT.get(path, path.removeprefix("inspector/"))
            texts[shipped_as] = response.text.replace(SVG_NAMESPACE, "")
            imported = [f"inspector/{name}" for name in MODULE_IMPORT.findall(response.text)]
            queue += [p for p in imported if p.removeprefix("inspector/") not in texts]
        for name, text in texts.items():
            found = EXTERNAL_URL.search(text)
            assert found is None, f"{name} refers to another origin: {found.group(0)!r}"
        shipped = {p.name for p in (files("agentjournal.inspector") / "static").iterdir()}
        assert set(texts) == shipped  # every shipped file is reachable from the page
        # Every module the page imports is preloaded at once (none is missed as modules change).
        modules = {name for name in shipped if name.endswith(".js")} - {"inspector.js"}
        assert {p.removeprefix("inspector/") for p in preloaded} == modules
        assert http.get("/inspector/missing.js").status_code == 404
        paths = http.get("/openapi.json").json()["paths"]
        assert not [
            p for p in paths if not p.startswith("/v1/") and p not in ("/healthz", "/metrics")
        ]


def test_the_external_url_check_can_fail() -> None:
    assert EXTERNAL_URL.search('<script src="https://cdn.example/x.js">')
    assert EXTERNAL_URL.search("@import url(//fonts.example/css);")
    assert not EXTERNAL_URL.search("// a comment\nconst a = b; // another")


# -- the sessions list ------------------------------------------------------------------------


def test_the_sessions_list_searches_and_filters_by_status(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        order = journal.create_session(f"订单客服 {tag}")
        docs = journal.create_session(f"Docs helper {tag}")
        old = journal.create_session(f"Old chat {tag}")
        journal.update_session(old.session_id, status="archived")
    page = inspector.open()
    links = page.locator("#session-list a")
    search = page.get_by_label("Search by title or id")
    search.fill(tag)
    # Most recent activity first: archiving was the last thing that happened.
    expect(links).to_have_count(3)
    expect(links).to_contain_text([f"Old chat {tag}", f"Docs helper {tag}", f"订单客服 {tag}"])
    search.fill(f"DOCS HELPER {tag}")
    expect(links).to_have_count(1)
    expect(links).to_contain_text([docs.session_id])
    search.fill(order.session_id)
    expect(links).to_have_count(1)
    expect(links).to_contain_text([f"订单客服 {tag}"])
    search.fill(tag)
    page.get_by_label("Status").select_option("archived")
    expect(links).to_have_count(1)
    expect(links).to_contain_text([old.session_id])
    page.get_by_label("Status").select_option("active")
    expect(links).to_have_count(2)


def test_load_more_fetches_the_next_page(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        for number in range(51):
            journal.create_session(f"bulk {tag} {number:02d}")
    page = inspector.open()
    links = page.locator("#session-list a")
    oldest = links.filter(has_text=f"bulk {tag} 00")
    expect(links).to_have_count(50)
    expect(links.filter(has_text=f"bulk {tag} ")).to_have_count(50)
    expect(oldest).to_have_count(0)  # the oldest is on the next page
    page.get_by_role("button", name="Load more").click()
    expect(oldest).to_have_count(1)


def test_load_more_continues_under_the_search(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        for number in range(52):
            journal.create_session(f"paged {tag} {number:02d}")
            journal.create_session(f"other {tag} {number:02d}")
    page = inspector.open()
    links = page.locator("#session-list a")
    page.get_by_label("Search by title or id").fill(f"PAGED {tag}")
    expect(page.locator("#session-count")).to_have_text("50 matching sessions (more to load)")
    expect(links.filter(has_text=f"paged {tag} ")).to_have_count(50)
    expect(links).to_have_count(50)
    page.get_by_role("button", name="Load more").click()
    expect(page.locator("#session-count")).to_have_text("52 matching sessions")
    expect(links).to_have_count(52)
    expect(links.filter(has_text=f"paged {tag} 00")).to_have_count(1)
    expect(page.get_by_role("button", name="Load more")).to_be_hidden()


def test_the_search_finds_a_session_that_was_not_loaded(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        wanted = journal.create_session(f"Ärger {tag} 订单客服").session_id
        for number in range(60):
            journal.create_session(f"newer {tag} {number:02d}")
    page = inspector.open()
    links = page.locator("#session-list a")
    expect(links).to_have_count(50)
    expect(links.filter(has_text=wanted)).to_have_count(0)  # beyond the first page
    typed = f"ärger {tag.upper()} 订单"
    page.get_by_label("Search by title or id").press_sequentially(typed)
    expect(page.locator("#session-count")).to_have_text("1 matching session")
    expect(links).to_have_count(1)
    expect(links).to_contain_text([f"Ärger {tag} 订单客服"])
    expect(links).to_contain_text([wanted])
    assert searches_asked(inspector)[-1] == typed


def searches_asked(inspector: Browsing) -> list[str]:
    """The `search` of each request the page made for the sessions list, in order."""
    queries = [urlsplit(r.url) for r in inspector.requests]
    found = [parse_qs(q.query).get("search") for q in queries if q.path == "/v1/sessions"]
    return [search[0] for search in found if search]


def test_typing_asks_the_api_once_it_pauses(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        wanted = journal.create_session(f"typed {tag}").session_id
    page = inspector.page
    page.clock.install()
    page = inspector.open()
    expect(page.locator("#session-list a").filter(has_text=wanted)).to_have_count(1)
    page.clock.pause_at(int(time.time() * 1000) + 60_000)  # from here on, time moves on request
    page.get_by_label("Search by title or id").press_sequentially(f"typed {tag}")
    page.clock.run_for(199)
    assert searches_asked(inspector) == []
    page.clock.run_for(1)
    expect(page.locator("#session-count")).to_have_text("1 matching session")
    assert searches_asked(inspector) == [f"typed {tag}"]


def test_a_stale_search_answer_is_dropped(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        journal.create_session(f"alpha {tag}")
        beta = journal.create_session(f"beta {tag}").session_id
    page = inspector.open()
    links = page.locator("#session-list a")
    expect(links.filter(has_text=f"beta {tag}")).to_have_count(1)
    held: list[Route] = []

    def hold_alpha(route: Route) -> None:
        if "alpha" in route.request.url:
            held.append(route)  # answered after the newer search
        else:
            route.continue_()

    page.route("**/v1/sessions?*", hold_alpha)
    search = page.get_by_label("Search by title or id")
    search.fill(f"alpha {tag}")
    for _ in range(400):  # bounded: the debounced request is on its way
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1
    search.fill(f"beta {tag}")
    expect(page.locator("#session-count")).to_have_text("1 matching session")
    expect(links).to_contain_text([beta])
    stale = {"sessions": [], "next_cursor": None}
    with contextlib.suppress(PlaywrightError):  # the page aborted it: nothing to answer
        held[0].fulfill(json=stale)
    page.wait_for_timeout(500)  # time for a wrong answer to be shown
    expect(page.locator("#session-count")).to_have_text("1 matching session")
    expect(links).to_have_count(1)
    expect(links).to_contain_text([beta])


def test_the_session_count_is_written_only_when_it_changes(inspector: Browsing) -> None:
    # It is a live region: each write is spoken, even of the same text.
    session_id = new_order_session(inspector)
    page = inspector.open(session_id)
    expect_live(page)
    count = page.locator("#session-count")
    search = page.get_by_label("Search by title or id")
    search.fill(session_id[:-1])
    expect(count).to_have_text("1 matching session")
    page.evaluate(
        """() => {
            window.__countWrites = 0;
            new MutationObserver(() => (window.__countWrites += 1)).observe(
                document.getElementById("session-count"),
                { childList: true, characterData: true, subtree: true });
        }"""
    )
    search.press_sequentially(session_id[-1])  # still the one match
    append(inspector.server, session_id, "user_message", {"content": "counted once"})
    expect(timeline(page)).to_contain_text("counted once")
    expect(page.locator("#session-list a[aria-current=page]")).to_contain_text("11 events")
    assert page.evaluate("window.__countWrites") == 0
    search.fill("")
    expect(count).not_to_contain_text("match")
    assert page.evaluate("window.__countWrites") == 1


def test_a_list_answer_older_than_a_live_event_does_not_undo_it(inspector: Browsing) -> None:
    # The list's page can be read before an append commits and arrive after the append's live
    # event: the open session's row must keep what the live event showed.
    session_id = new_order_session(inspector)
    page = inspector.open(session_id)
    expect_live(page)
    row = page.locator("#session-list a[aria-current=page]")
    expect(row).to_contain_text("10 events")
    held: list[tuple[Route, Any]] = []
    page.route("**/v1/sessions?*", lambda route: held.append((route, route.fetch())))
    page.get_by_label("Search by title or id").fill(session_id)
    for _ in range(400):  # bounded: the debounced request is on its way
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1  # answered by the server with the session at 10 events
    append(inspector.server, session_id, "user_message", {"content": "after the list was read"})
    expect(timeline(page)).to_contain_text("after the list was read")
    expect(row).to_contain_text("11 events")
    route, stale = held[0]
    route.fulfill(response=stale)
    expect(page.locator("#session-count")).to_have_text("1 matching session")
    expect(row).to_contain_text("11 events")


def test_the_sessions_list_is_live(inspector: Browsing) -> None:
    tag = secrets.token_hex(3)
    with inspector.journal() as journal:
        older = journal.create_session(f"older {tag}").session_id
        newer = journal.create_session(f"newer {tag}").session_id
    page = inspector.open()
    links = page.locator("#session-list a")
    expect(links.first).to_contain_text(f"newer {tag}")
    lists_asked = len(sessions_pages_asked(inspector))
    # Activity moves a session to the top with its count, without asking for the list.
    with inspector.journal() as journal:
        for number in range(30):
            journal.append(older, "user_message", {"content": f"news {number}"})
    expect(links.first).to_contain_text(f"older {tag}")
    expect(links.first).to_contain_text("31 events")
    expect(links.nth(1)).to_contain_text(newer)
    assert len(sessions_pages_asked(inspector)) == lists_asked
    # A new session brings the first page again, and shows at the top.
    with inspector.journal() as journal:
        created = journal.create_session(f"created {tag}").session_id
        journal.update_session(newer, status="deleted")
    expect(links.first).to_contain_text(created)
    expect(links.filter(has_text=newer)).to_have_count(0)  # deleted: not in "Not deleted"
    # The feed's news is shown at most once a second: one reload for both.
    assert len(sessions_pages_asked(inspector)) <= lists_asked + 2


def sessions_pages_asked(inspector: Browsing) -> list[str]:
    return [r.url for r in inspector.requests if urlsplit(r.url).path == "/v1/sessions"]


# -- one session's timeline -------------------------------------------------------------------


def test_a_tool_call_is_folded_under_its_assistant_turn(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    with inspector.journal() as journal:
        journal.append_many(
            session_id,
            [
                {"type": "user_message", "payload": {"content": "Weather in Paris?"}},
                {
                    "type": "tool_call",
                    "payload": {
                        "call_id": "w1",
                        "name": "get_weather",
                        "arguments": '{"city":"Paris","units":"metric"}',
                    },
                },
                {
                    "type": "tool_result",
                    "payload": {"call_id": "w1", "content": "upstream timeout", "is_error": True},
                },
                {"type": "assistant_message", "payload": {"content": "The service is down."}},
            ],
        )
    page = inspector.open(session_id)
    turn = page.locator("#timeline li.assistant").filter(has_text=ORDER_REPLY)
    call = turn.locator("details.tool-call")
    expect(call).to_have_count(1)
    expect(call.locator("summary")).to_contain_text("query_order_count")
    expect(call.locator("summary")).to_contain_text("ok")
    call.locator("summary").click()
    expect(call.locator("pre.arguments")).to_have_text("{}")
    expect(call.locator("pre.result")).to_have_text("42")
    failed = page.locator("#timeline li.assistant").filter(has_text="The service is down.")
    failed_call = failed.locator("details.tool-call")
    expect(failed_call.locator("summary")).to_contain_text("get_weather")
    expect(failed_call.locator("summary")).to_contain_text("error")
    failed_call.locator("summary").press("Enter")  # a <summary> is a keyboard control
    expect(failed_call.locator("pre.arguments")).to_have_text(
        '{\n  "city": "Paris",\n  "units": "metric"\n}'
    )
    expect(failed_call.locator("pre.result")).to_have_text("upstream timeout")
    expect(failed_call.locator("pre.result")).to_have_class(re.compile("is-error"))
    # User messages stand on their own, never inside an assistant turn.
    expect(page.locator("#timeline li.user").filter(has_text=GREETING)).to_have_count(1)
    expect(page.locator("#timeline li.assistant li.user")).to_have_count(0)


def test_other_events_are_shown_and_their_text_stays_text(inspector: Browsing) -> None:
    session_id = new_order_session(inspector, progress=None)
    hostile = '<img src=x onerror="window.__owned=1"><b>bold</b>'
    # Task types and custom event types are checked names ([a-z0-9_.:-]): no markup gets in.
    with inspector.journal() as journal:
        first = journal.append(session_id, "user_message", {"content": hostile})
        journal.append(session_id, "assistant_message", {"content": "ok"})
        journal.append(
            session_id, "user_message", {"content": "corrected text", "supersedes": first.seq}
        )
        journal.append(session_id, "myapp.memory_saved", {"note": "<script>x</script>"})
        journal.compact(session_id, until_seq=first.seq, summary="they asked about orders")
        journal.update_session(session_id, title=hostile)
        call = {"call_id": "h1", "name": hostile, "arguments": hostile}
        journal.append(session_id, "tool_call", call)
        journal.append(session_id, "tool_result", {"call_id": "h1", "content": hostile})
        task = journal.tasks(session_id=session_id)[0]
        journal.task_progress(task.task_id, 0.5, attempt=task.attempt, message=hostile)
    page = inspector.open(session_id)
    expect(page.locator("#session-title")).to_have_text(hostile)
    expect(page.locator("#session-list a[aria-current=page] .session-name")).to_have_text(hostile)
    tool = timeline(page).locator('details[data-call-id="h1"]')
    expect(tool.locator(".tool-name")).to_have_text(hostile)
    tool.locator("summary").click()
    expect(tool.locator("pre.arguments")).to_have_text(hostile)
    expect(tool.locator("pre.result")).to_have_text(hostile)
    expect(page.locator("#tasks .task-message")).to_have_text(hostile)
    expect(timeline(page).locator("li.task-event").last).to_contain_text(f"50%: {hostile}")
    original = page.locator(f'#timeline li.user[data-seq="{first.seq}"]')
    expect(original.locator(".content")).to_have_text("corrected text")
    expect(original).to_contain_text(f"edited by #{first.seq + 2}")
    expect(timeline(page).locator("li.correction")).to_contain_text(
        f"Correction of event #{first.seq}"
    )
    custom = timeline(page).locator("li.custom")
    expect(custom).to_contain_text("myapp.memory_saved")
    expect(custom.locator("pre.payload")).to_contain_text('"note": "<script>x</script>"')
    expect(timeline(page).locator("li.compacted")).to_contain_text(
        f"Context compacted through event #{first.seq}"
    )
    timeline(page).locator("li.compacted details.summary summary").click()
    expect(timeline(page).locator("li.compacted")).to_contain_text("they asked about orders")
    expect(timeline(page).locator("li.updated")).to_contain_text(f"renamed to “{hostile}”")
    expect(page.locator("body img, body b, body script")).to_have_count(0)
    # Before the correction, the original text is shown, as text.
    page.get_by_label("Time travel").fill(str(first.seq))
    expect(original.locator(".content")).to_have_text(hostile)
    expect(page.locator("body img, body b, body script")).to_have_count(0)
    assert page.evaluate("window.__owned") is None


def test_opening_another_session_shows_only_that_session(inspector: Browsing) -> None:
    with inspector.journal() as journal:
        first = order_session(journal)
        second = journal.create_session("second chat")
        journal.append(second.session_id, "user_message", {"content": "only in the second"})
    page = inspector.open(first)
    expect(timeline(page)).to_contain_text(GREETING)
    page.locator("#session-list a").filter(has_text=second.session_id).click()
    expect(page.locator("#session-title")).to_have_text("second chat")
    expect(timeline(page).locator("li.user .content")).to_have_text(["only in the second"])
    expect(timeline(page)).not_to_contain_text(GREETING)
    expect(page.locator("#tasks")).to_have_text("No tasks in this session.")
    page.evaluate("location.hash = '#/sessions/sess_missing'")
    expect(page.locator("#problem")).to_contain_text("Session not found")
    expect(page.get_by_role("heading", name="No session open")).to_be_visible()


def test_raw_json_of_an_event_is_shown_on_demand(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    page = inspector.open(session_id)
    events = api_events(inspector.server, session_id)
    raw = page.locator('#timeline details.raw[data-seq="4"]')
    expect(raw.locator("pre")).to_have_count(0)  # built when asked for
    raw.locator("summary").click()
    assert json.loads(raw.locator("pre").inner_text()) == events[3]
    page.locator("details.tool-call summary").first.click()
    result = page.locator('#timeline details.raw[data-seq="6"]')
    result.locator("summary").click()
    assert json.loads(result.locator("pre").inner_text()) == events[5]
    assert events[5]["type"] == "tool_result"


# -- live updates -----------------------------------------------------------------------------


def test_events_appended_by_other_clients_appear_without_a_reload(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    page = inspector.open(session_id)
    expect_live(page)
    page.evaluate("window.__sameDocument = true")
    append(inspector.server, session_id, "user_message", {"content": "还有别的订单吗？"})
    expect(timeline(page).locator("li.user").last).to_contain_text("还有别的订单吗？")
    expect(page.locator("#announcer")).to_have_text("New user message (event 11)")
    with inspector.journal() as journal:  # another process' commit, on the same file
        journal.append(session_id, "assistant_message", {"content": "没有别的了。"})
    expect(timeline(page).locator("li.assistant").last).to_contain_text("没有别的了。")
    expect(page.locator("#travel-output")).to_have_text("event 12 of 12 · live")
    expect(page.locator("#announcer")).to_have_text("New assistant message (event 12)")
    assert page.evaluate("window.__sameDocument") is True
    expect(timeline(page).locator("li.user").filter(has_text="还有别的订单吗？")).to_have_count(1)


def test_a_task_progress_bar_updates_live(inspector: Browsing) -> None:
    session_id = new_order_session(inspector, progress=None)
    task_type = f"export.{secrets.token_hex(3)}"
    page = inspector.open(session_id)
    expect_live(page)
    server = inspector.server
    tasks = [post(server, f"/v1/sessions/{session_id}/tasks", {"type": task_type}) for _ in "ab"]
    # Two tasks of one type: each bar's name says which task it is.
    bars = [
        page.get_by_role("progressbar", name=f"{task_type}, task …{t['task_id'][-6:]}", exact=True)
        for t in tasks
    ]
    for each in bars:
        expect(each).to_have_count(1)
    expect(page.locator("#tasks li.task-pending")).to_have_count(2)
    claimed = post(server, "/v1/tasks/claim", {"worker": "w9", "types": [task_type]})
    task = next(t for t in tasks if t["task_id"] == claimed["task_id"])
    bar = bars[tasks.index(task)]
    card = page.locator(f'#tasks li[data-task-id="{task["task_id"]}"]')
    expect(bar).to_have_attribute("value", "0")
    progress = f"/v1/tasks/{task['task_id']}/progress"
    post(server, progress, {"attempt": claimed["attempt"], "progress": 0.25})
    expect(bar).to_have_attribute("value", "25")
    expect(card).to_contain_text("running")
    post(server, progress, {"attempt": claimed["attempt"], "progress": 0.75, "message": "3 of 4"})
    expect(bar).to_have_attribute("value", "75")
    expect(card.locator(".task-message")).to_have_text("3 of 4")
    expect(bar).to_have_accessible_description("3 of 4")
    complete = f"/v1/tasks/{task['task_id']}/complete"
    post(server, complete, {"attempt": claimed["attempt"], "output": {"rows": 4}})
    expect(bar).to_have_attribute("value", "100")
    expect(card).to_contain_text("completed")


def test_the_focus_stays_on_a_control_that_an_update_rebuilds(inspector: Browsing) -> None:
    parent = new_order_session(inspector)
    with inspector.journal() as journal:
        session_id = journal.fork(parent, at_seq=10).session_id  # seq 11: session_forked
        journal.append(session_id, "user_message", {"content": "look it up"})  # seq 12
        call = {"call_id": "f1", "name": "lookup", "arguments": "{}"}
        journal.append(session_id, "tool_call", call)  # seq 13: a turn of its own
    server = inspector.server
    page = inspector.open(session_id)
    expect_live(page)
    # A live event changes the facts (the event count) but not the "Forked from" link.
    forked_from = page.locator("#session-facts a")
    forked_from.focus()
    append(server, session_id, "user_message", {"content": "one"})  # seq 14
    expect(page.locator("#session-facts")).to_contain_text("14")
    expect(forked_from).to_be_focused()
    # The open session's link in the sidebar is rebuilt: its event count changed.
    link = page.locator("#session-list a[aria-current=page]")
    link.focus()
    append(server, session_id, "user_message", {"content": "two"})  # seq 15
    expect(link).to_contain_text("15 events")
    expect(link).to_be_focused()
    # A tool call's result arrives while its (open) summary has the focus.
    tool = timeline(page).locator('details[data-call-id="f1"]')
    summary = tool.locator(":scope > summary")
    summary.focus()
    page.keyboard.press("Enter")
    expect(tool.locator("pre.result")).to_have_count(0)
    append(server, session_id, "tool_result", {"call_id": "f1", "content": "found"})  # seq 16
    expect(summary).to_contain_text("#13 → #16")
    expect(summary).to_be_focused()
    expect(tool.locator("pre.result")).to_have_text("found")  # still open
    # A turn's seq button travels to a point that rebuilds that turn.
    turn = timeline(page).locator('li.assistant[data-seq="13"]')
    seq = turn.get_by_role("button", name="Show the session as of event 13")
    seq.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#travel-output")).to_have_text("event 13 of 16")
    expect(summary).to_contain_text("waiting for result")
    expect(seq).to_be_focused()
    # "Back to live" disables itself: the slider, which moved with it, takes the focus.
    page.get_by_role("button", name="Back to live").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#travel-output")).to_have_text("event 16 of 16 · live")
    expect(page.get_by_label("Time travel")).to_be_focused()


def test_the_stream_resumes_after_the_last_event_it_saw(
    browsing_factory: BrowsingFactory, tmp_path: Any
) -> None:
    db_path = tmp_path / "journal.db"
    with Journal.open(db_path) as journal:
        session_id = order_session(journal)  # seq 1-10
    first = launch(db_path)
    servers = [first]
    try:
        browsing = browsing_factory(first)
        page = browsing.open(session_id)
        expect_live(page)
        with Journal.open(db_path) as journal:
            journal.append(session_id, "user_message", {"content": "seen live"})  # seq 11
        expect(timeline(page).locator("li.user").last).to_contain_text("seen live")
        first.stop()
        expect(page.locator("#live-state")).to_have_attribute("data-state", "reconnecting")
        with Journal.open(db_path) as journal:
            journal.append(session_id, "user_message", {"content": "written while it was down"})
        servers.append(launch(db_path, port=first.port))
        expect(timeline(page).locator("li.user").last).to_contain_text("written while it was down")
        expect_live(page)
        expect(page.locator("#travel-output")).to_have_text("event 12 of 12 · live")
        streams = [
            r for r in browsing.requests if r.url.endswith(f"/sessions/{session_id}/events/stream")
        ]
        sent = [r.all_headers().get("last-event-id") for r in streams]
        # The first asked for what followed the page's load; every later one, for what
        # followed the last event it received live.
        assert len(sent) >= 2, sent
        assert sent[0] == "10", sent
        assert set(sent[1:]) == {"11"}, sent
        # Each event once: the top-level items are the events 1-12 (a turn is keyed by its
        # first event: 5 holds the call, its result and the reply).
        items = timeline(page).locator(":scope > li")
        expect(items).to_have_count(10)
        seqs = items.evaluate_all("(items) => items.map((li) => Number(li.dataset.seq))")
        assert seqs == [1, 2, 3, 4, 5, 8, 9, 10, 11, 12], seqs
    finally:
        for running in servers:
            running.stop()


def test_the_stream_backs_off_on_server_errors_and_recovers(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    page = inspector.page
    page.add_init_script(COUNT_ABORT_LISTENERS)
    attempts: list[float] = []

    def fail_three_times(route: Route) -> None:
        attempts.append(time.monotonic())
        if len(attempts) > 3:
            route.continue_()
            return
        problem = {"title": "Internal Server Error", "status": 500}
        route.fulfill(status=500, content_type="application/problem+json", json=problem)

    page.route("**/sessions/*/events/stream", fail_three_times)
    inspector.open(session_id)
    expect(page.locator("#live-state")).to_contain_text(re.compile(r"Reconnecting.*HTTP 500"))
    append(inspector.server, session_id, "user_message", {"content": "sent while it failed"})
    expect_live(page)
    expect(timeline(page).locator("li.user").last).to_contain_text("sent while it failed")
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts[:4])]
    # Waits of 1, 2 and 4 s: they double (a fixed delay would give three equal gaps).
    assert gaps[2] > gaps[0] + 1.5, gaps
    # Each wait removed its abort listener: only the open stream's one is left.
    assert page.evaluate("window.__abortListeners()") == 1


def test_a_stream_the_server_refuses_stops_and_says_why(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    attempts: list[str] = []

    def refuse(route: Route) -> None:
        attempts.append(route.request.url)
        problem = {"title": "Invalid request", "status": 422, "detail": "no such cursor"}
        route.fulfill(status=422, content_type="application/problem+json", json=problem)

    inspector.page.route("**/sessions/*/events/stream", refuse)
    page = inspector.open(session_id)
    state = page.locator("#live-state")
    expect(state).to_have_text("Stopped following (HTTP 422): no such cursor")
    expect(state).to_have_attribute("data-state", "closed")
    page.wait_for_timeout(2500)  # longer than any retry delay: none comes
    assert len(attempts) == 1, attempts
    expect(timeline(page)).to_contain_text(ORDER_REPLY)  # what was loaded stays shown


def test_switching_sessions_leaves_the_previous_one_behind(inspector: Browsing) -> None:
    with inspector.journal() as journal:
        first = order_session(journal)
        second = journal.create_session("second chat").session_id
    page = inspector.open(first)
    expect_live(page)
    page.evaluate(RECORD_ANNOUNCEMENTS)
    # An event, and at once another session: the event's batched announcement (600 ms) is for
    # a session no longer shown, and must not be spoken.
    page.evaluate(SWITCH_WHEN_SHOWN, ["news of the first", f"#/sessions/{second}"])
    first_stream = f"/v1/sessions/{first}/events/stream"
    with page.expect_event("requestfailed", lambda r: r.url.endswith(first_stream)):
        append(inspector.server, first, "user_message", {"content": "news of the first"})
    expect(page.locator("#session-title")).to_have_text("second chat")
    expect_live(page)
    append(inspector.server, first, "user_message", {"content": "later news of the first"})
    append(inspector.server, second, "user_message", {"content": "news of the second"})
    expect(timeline(page).locator("li.user .content")).to_have_text(["news of the second"])
    expect(timeline(page)).not_to_contain_text("of the first")
    expect(page.locator("#announcer")).to_have_text("New user message (event 2)")
    assert page.evaluate("window.__announced") == ["New user message (event 2)"]


# -- time travel and forks --------------------------------------------------------------------


def test_the_slider_shows_the_session_as_of_an_event(inspector: Browsing) -> None:
    task_type = f"report.{secrets.token_hex(3)}"
    session_id = new_order_session(inspector, task_type=task_type, progress=0.3)  # seq 10
    with inspector.journal() as journal:
        journal.append(session_id, "user_message", {"content": "later question"})  # seq 11
        task = journal.tasks(session_id=session_id)[0]
        journal.task_progress(task.task_id, 0.8, attempt=task.attempt)  # seq 12
    page = inspector.open(session_id)
    bar = page.get_by_role("progressbar", name=task_type)
    slider = page.get_by_label("Time travel")
    output = page.locator("#travel-output")
    expect(bar).to_have_attribute("value", "80")
    expect(timeline(page)).to_contain_text("later question")
    slider.fill("10")
    expect(output).to_have_text("event 10 of 12")
    expect(timeline(page)).not_to_contain_text("later question")
    expect(bar).to_have_attribute("value", "30")
    expect(page.locator("#tasks-heading")).to_have_text("Tasks as of event 10")
    slider.fill("7")
    expect(timeline(page)).to_contain_text(ORDER_REPLY)
    expect(page.locator("#tasks")).to_have_text("No tasks in this session.")
    slider.fill("4")
    expect(timeline(page)).not_to_contain_text(ORDER_REPLY)
    expect(timeline(page).locator("details.tool-call")).to_have_count(0)
    # A live event while travelling moves the end, not the point shown.
    append(inspector.server, session_id, "assistant_message", {"content": "newest reply"})
    expect(output).to_have_text("event 4 of 13")
    expect(timeline(page)).not_to_contain_text("newest reply")
    # The slider is a keyboard control.
    slider.focus()
    page.keyboard.press("End")
    expect(output).to_have_text("event 13 of 13 · live")
    expect(timeline(page)).to_contain_text("newest reply")
    page.keyboard.press("Home")
    expect(output).to_have_text("event 1 of 13")
    page.keyboard.press("ArrowRight")
    expect(output).to_have_text("event 2 of 13")
    expect(timeline(page)).to_contain_text(GREETING)
    page.get_by_role("button", name="Back to live").click()
    expect(output).to_have_text("event 13 of 13 · live")


def test_fork_here_opens_a_session_with_the_events_up_to_that_point(inspector: Browsing) -> None:
    session_id = new_order_session(inspector, progress=0.5)
    page = inspector.open(session_id)
    page.get_by_label("Time travel").fill("10")
    page.get_by_role("button", name="Fork here").click()
    expect(page).not_to_have_url(re.compile(re.escape(session_id)))
    fork_id = page.evaluate("decodeURIComponent(location.hash.split('/').pop())")
    expect(page.locator("#travel-output")).to_have_text("event 11 of 11 · live")
    expect(timeline(page).locator("li.forked")).to_contain_text(
        f"Forked from {session_id} at event #10"
    )
    expect(timeline(page)).to_contain_text(ORDER_REPLY)
    # Copied task events made no task in the fork.
    expect(page.locator("#tasks")).to_have_text("No tasks in this session.")
    expect(page.locator("#session-list a").filter(has_text=fork_id)).to_have_count(1)
    parent, fork = api_events(inspector.server, session_id), api_events(inspector.server, fork_id)
    assert [(e["type"], e["payload"]) for e in fork[:10]] == [
        (e["type"], e["payload"]) for e in parent[:10]
    ]
    assert fork[10]["type"] == "session_forked"
    assert fork[10]["payload"] == {"from_session_id": session_id, "at_seq": 10}
    assert len(fork) == 11


def test_a_fork_answered_after_another_session_was_opened_stays_out_of_the_way(
    inspector: Browsing,
) -> None:
    with inspector.journal() as journal:
        first = order_session(journal)
        second = journal.create_session("second chat").session_id
    held: list[Route] = []
    inspector.page.route("**/fork", lambda route: held.append(route))  # answered later
    page = inspector.open(first)
    fork_button = page.get_by_role("button", name="Fork here")
    fork_button.click()
    expect(fork_button).to_be_disabled()
    page.locator("#session-list a").filter(has_text=second).click()
    expect(page.locator("#session-title")).to_have_text("second chat")
    expect(fork_button).to_be_enabled()  # no fork of this session is waiting
    assert len(held) == 1
    with page.expect_response("**/fork") as answered:
        held[0].continue_()
    fork_id = answered.value.json()["session_id"]
    expect(page.locator("#session-list a").filter(has_text=fork_id)).to_have_count(1)
    page.wait_for_timeout(500)  # time for a wrong jump to the fork to happen
    assert page.url.endswith(f"#/sessions/{second}")
    expect(page.locator("#session-title")).to_have_text("second chat")
    expect(fork_button).to_be_enabled()


def test_a_fork_the_journal_refuses_is_explained(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    page = inspector.open(session_id)
    page.get_by_label("Time travel").fill("5")  # the tool call, without its result
    page.get_by_role("button", name="Fork here").click()
    expect(page.locator("#problem")).to_be_visible()
    expect(page.locator("#problem")).to_contain_text("Conflict")
    assert session_id in page.url


# -- API keys ---------------------------------------------------------------------------------


def test_with_api_keys_the_page_asks_for_one_and_never_puts_it_in_a_url(
    browsing_factory: BrowsingFactory, keyed_server: RunningServer
) -> None:
    key = keyed_server.keys["acme"]
    with Journal.open(keyed_server.db_path, tenant="acme") as journal:
        session_id = order_session(journal, title="acme 订单客服")
    browsing = browsing_factory(keyed_server)
    page = browsing.open()
    expect(page.get_by_role("heading", name="API key required")).to_be_visible()
    expect(page.get_by_label("API key", exact=True)).to_be_focused()
    page.get_by_label("API key", exact=True).fill("aj_not_a_key")
    page.get_by_role("button", name="Use this key").click()
    expect(page.locator("#auth-error")).to_have_text("The server did not accept that key.")
    page.get_by_label("API key", exact=True).fill(key)
    page.keyboard.press("Enter")
    # The key's form is gone: the focus goes on to the sessions, not back to <body>.
    expect(page.get_by_label("Search by title or id")).to_be_focused()
    link = page.locator("#session-list a").filter(has_text=session_id)
    link.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#session-title")).to_have_text("acme 订单客服")
    expect(timeline(page)).to_contain_text(ORDER_REPLY)
    expect_live(page)
    append(keyed_server, session_id, "user_message", {"content": "keyed and live"})
    expect(timeline(page)).to_contain_text("keyed and live")
    page.reload()  # the tab keeps the key: no second prompt
    expect(timeline(page)).to_contain_text("keyed and live")
    expect_live(page)

    assert page.evaluate(f"sessionStorage.getItem('{KEY_STORAGE}')") == key
    assert page.evaluate("localStorage.length") == 0
    assert browsing.requests
    assert not [r.url for r in browsing.requests if key in r.url]
    api_calls = [r for r in browsing.requests if "/v1/" in r.url]
    keyed = [r for r in api_calls if r.all_headers().get("authorization") == f"Bearer {key}"]
    endpoints = {r.url.split("?")[0].rsplit("/", 1)[-1] for r in keyed}
    assert endpoints >= {"sessions", "events", "tasks", "stream"}, endpoints
    page.get_by_role("button", name="Forget API key").click()
    expect(page.get_by_role("heading", name="API key required")).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem('{KEY_STORAGE}')") is None


# -- accessibility and the stream parser ------------------------------------------------------


def test_landmarks_labels_and_keyboard_use(inspector: Browsing) -> None:
    session_id = new_order_session(inspector)
    page = inspector.open()
    for role in ("banner", "navigation", "main"):
        expect(page.get_by_role(role)).to_have_count(1)
    page.locator("#session-list a").filter(has_text=session_id).focus()
    page.keyboard.press("Enter")
    expect(page.locator("#session-title")).to_be_focused()
    expect(timeline(page).locator("li")).not_to_have_count(0)
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button, summary')]
            .filter((el) => el.checkVisibility())
            .filter((el) => !(el.labels?.length || el.getAttribute('aria-label')
                || el.getAttribute('aria-labelledby') || el.textContent.trim()))
            .map((el) => el.outerHTML)"""
    )
    assert unlabelled == []
    clickable_non_controls = page.evaluate(
        """() => [...document.querySelectorAll('div, span, li, p')]
            .filter((el) => !el.closest('a, button, summary, label'))
            .filter((el) => getComputedStyle(el).cursor === 'pointer').length"""
    )
    assert clickable_non_controls == 0
    page.keyboard.press("Tab")
    expect(page.get_by_label("Time travel")).to_be_focused()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    # "Fork here" says where it forks.
    assert accessible_description(page, "button", "Fork here") == "event 10 of 10 · live"
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#travel-output")).to_have_text("event 9 of 10")
    assert accessible_description(page, "button", "Fork here") == "event 9 of 10"
    expect(page.locator("#announcer")).to_have_attribute("aria-live", "polite")


def test_the_stream_parser_handles_split_lines_comments_ids_and_retry(
    inspector: Browsing,
) -> None:
    page = inspector.open()
    parsed = page.evaluate(
        """async (chunks) => {
            const { SseParser } = await import('./inspector/sse.js');
            const parser = new SseParser();
            const events = chunks.flatMap((chunk) => parser.push(chunk));
            return {events, lastEventId: parser.lastEventId, retry: parser.retry,
                    comments: parser.comments};
        }""",
        [
            ": ping\r\n\r\n",
            'id: 5\r\nevent: user_message\r\ndata: {"a":',
            "1}\r\n\r\n",
            "data: a\r",  # a CRLF split between two chunks is one line end
            "\ndata:b\r\n\r\n",
            "retry: 1500\nid: 6\nevent\ndata\n\n",
            "id: 7\n\n",  # an id without data moves the cursor and dispatches nothing
            "data: unfinished\n",
        ],
    )
    assert parsed["events"] == [
        {"type": "user_message", "data": '{"a":1}', "id": "5"},
        {"type": "message", "data": "a\nb", "id": "5"},
        {"type": "message", "data": "", "id": "6"},
    ]
    assert parsed["lastEventId"] == "7"
    assert parsed["retry"] == 1500
    assert parsed["comments"] == 1

"""The web inspector at `/`, in Debian's headless chromium, over a real `agentjournal serve` on a
SQLite file. Other clients (httpx, or the library on the same file) change the journal while
the page is open; the page must show it without a reload."""

from __future__ import annotations

import json
import re
import secrets
from importlib.resources import files
from typing import Any

import httpx
from browsing import Browsing, BrowsingFactory
from playwright.sync_api import Locator, Page, expect
from scenes import GREETING, ORDER_REPLY, order_session

from agentjournal import Journal
from server.conftest import RunningServer, auth, launch

EXTERNAL_URL = re.compile(r"https?://|[\"'(=]\s*//[^/\s]", re.IGNORECASE)
MODULE_IMPORT = re.compile(r"""from\s+["']\./([\w.-]+)["']""")
KEY_STORAGE = "agentjournal.apiKey"


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
        assert sorted(linked) == ["inspector/inspector.css", "inspector/inspector.js"], linked
        texts = {"index.html": page.text}
        queue = list(linked)
        while queue:
            path = queue.pop()
            response = http.get(f"/{path}")
            assert response.status_code == 200, path
            texts[path.removeprefix("inspector/")] = response.text
            imported = [f"inspector/{name}" for name in MODULE_IMPORT.findall(response.text)]
            queue += [p for p in imported if p.removeprefix("inspector/") not in texts]
        for name, text in texts.items():
            found = EXTERNAL_URL.search(text)
            assert found is None, f"{name} refers to another origin: {found.group(0)!r}"
        shipped = {p.name for p in (files("agentjournal.inspector") / "static").iterdir()}
        assert set(texts) == shipped  # every shipped file is reachable from the page
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
    expect(links).to_have_count(50)
    page.get_by_label("Search by title or id").fill(f"bulk {tag} 00")
    expect(links).to_have_count(0)  # the oldest is on the next page
    page.get_by_role("button", name="Load more").click()
    expect(links).to_have_count(1)


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
    with inspector.journal() as journal:
        first = journal.append(session_id, "user_message", {"content": hostile})
        journal.append(session_id, "assistant_message", {"content": "ok"})
        journal.append(
            session_id, "user_message", {"content": "corrected text", "supersedes": first.seq}
        )
        journal.append(session_id, "myapp.memory_saved", {"note": "<script>x</script>"})
        journal.compact(session_id, until_seq=first.seq, summary="they asked about orders")
        journal.update_session(session_id, title="renamed chat")
    page = inspector.open(session_id)
    expect(page.locator("#session-title")).to_have_text("renamed chat")
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
    expect(timeline(page).locator("li.updated")).to_contain_text("renamed to “renamed chat”")
    # Before the correction, the original text is shown, as text.
    page.get_by_label("Time travel").fill(str(first.seq))
    expect(original.locator(".content")).to_have_text(hostile)
    expect(timeline(page).locator("img, b, script")).to_have_count(0)
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
    task = post(server, f"/v1/sessions/{session_id}/tasks", {"type": task_type})
    bar = page.get_by_role("progressbar", name=task_type)
    card = page.locator(f'#tasks li[data-task-id="{task["task_id"]}"]')
    expect(bar).to_have_attribute("value", "0")
    expect(card).to_contain_text("pending")
    claimed = post(server, "/v1/tasks/claim", {"worker": "w9", "types": [task_type]})
    progress = f"/v1/tasks/{task['task_id']}/progress"
    post(server, progress, {"attempt": claimed["attempt"], "progress": 0.25})
    expect(bar).to_have_attribute("value", "25")
    expect(card).to_contain_text("running")
    post(server, progress, {"attempt": claimed["attempt"], "progress": 0.75, "message": "3 of 4"})
    expect(bar).to_have_attribute("value", "75")
    expect(card.locator(".task-message")).to_have_text("3 of 4")
    complete = f"/v1/tasks/{task['task_id']}/complete"
    post(server, complete, {"attempt": claimed["attempt"], "output": {"rows": 4}})
    expect(bar).to_have_attribute("value", "100")
    expect(card).to_contain_text("completed")


def test_the_stream_resumes_after_the_last_event_it_saw(
    browsing_factory: BrowsingFactory, tmp_path: Any
) -> None:
    db_path = tmp_path / "journal.db"
    with Journal.open(db_path) as journal:
        session_id = order_session(journal)
    first = launch(db_path)
    servers = [first]
    try:
        browsing = browsing_factory(first)
        page = browsing.open(session_id)
        expect_live(page)
        first.stop()
        expect(page.locator("#live-state")).to_have_text("Reconnecting…")
        with Journal.open(db_path) as journal:
            journal.append(session_id, "user_message", {"content": "written while it was down"})
        servers.append(launch(db_path, port=first.port))
        expect(timeline(page).locator("li.user").last).to_contain_text("written while it was down")
        expect_live(page)
        streams = [r for r in browsing.requests if r.url.endswith("/events/stream")]
        assert len(streams) >= 2
        assert {r.all_headers().get("last-event-id") for r in streams} == {"10"}
        expect(timeline(page).locator("li.user")).to_have_count(3)
    finally:
        for running in servers:
            running.stop()


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
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#travel-output")).to_have_text("event 9 of 10")
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

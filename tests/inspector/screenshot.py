"""Writes docs/inspector.png: the inspector showing the seed's 订单客服 session (the order-count
tool call with its result, and a report task part way through), over a real `agentjournal serve`
on a scratch SQLite file, in Debian's headless chromium.

Run: .venv/bin/python tests/inspector/screenshot.py [OUTPUT]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # scenes and chromium here; server/ beside

from browsing import chromium_problem, launch_chromium  # noqa: E402
from scenes import order_session  # noqa: E402

from agentjournal import Journal  # noqa: E402
from server.conftest import launch  # noqa: E402

OUTPUT = HERE.parents[1] / "docs" / "inspector.png"
VIEWPORT = {"width": 1440, "height": 900}


def seed(db: Path) -> str:
    """A few sessions for the list; returns the one to show."""
    with Journal.open(db) as journal:
        docs = journal.create_session("文档助手", model="scripted")
        journal.append_many(
            docs.session_id,
            [
                {"type": "user_message", "payload": {"content": "帮我总结一下这份文档"}},
                {
                    "type": "assistant_message",
                    "payload": {"content": "这份文档讲的是事件溯源：事件只追加，状态由重放得出。"},
                },
            ],
        )
        archived = journal.create_session("Refund follow-up", model="scripted")
        journal.append(archived.session_id, "user_message", {"content": "Is my refund done?"})
        journal.update_session(archived.session_id, status="archived")
        return order_session(journal)


def has_cjk_font() -> bool | None:
    """Whether fontconfig knows a Chinese font (None: no fc-list to ask). Without one, chromium
    draws the seed's Chinese text as boxes."""
    if shutil.which("fc-list") is None:
        return None
    found = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, check=False)
    return bool(found.stdout.strip())


def main(output: Path) -> None:
    problem = chromium_problem()
    if problem is not None:
        sys.exit(problem)
    if has_cjk_font() is False:
        warning = "no Chinese font installed (apt-get install fonts-noto-cjk): the seed's"
        print(f"warning: {warning} Chinese text will show as boxes", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "journal.db"
        session_id = seed(db)
        server = launch(db)
        try:
            with sync_playwright() as playwright:
                browser = launch_chromium(playwright)
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(f"{server.base_url}/#/sessions/{session_id}")
                expect(page.locator("#live-state")).to_have_text("Live")
                page.locator("details.tool-call summary").first.click()
                expect(page.locator("pre.result").first).to_be_visible()
                # From the top: a full-page shot of a page scrolled down would draw the sticky top
                # bar where the view was, over the session's title.
                page.evaluate("window.scrollTo(0, 0)")
                output.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(output), full_page=True)
                browser.close()
        finally:
            server.stop()
    print(f"wrote {output}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT)

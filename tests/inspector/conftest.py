"""Fixtures for the inspector's browser tests: a real `agentjournal serve` over a SQLite file
(started by tests/server/conftest.py's `launch`), Debian's chromium driven by Playwright, and a
fresh browser context per test that records every request the page makes and fails the test on
any uncaught script error.

- `server`: open mode (no keys), module scope; `.db_path` is the file the tests also write with
  the library (another client, as far as the page knows).
- `keyed_server`: a key for tenant "acme" (`.keys["acme"]`), module scope.
- `inspector`: a `Browsing` on `server`; `browsing_factory(server)` for another server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browsing import Browsing, BrowsingFactory, launch_chromium, require_chromium
from playwright.sync_api import Browser, expect, sync_playwright

from server.conftest import RunningServer, create_keys, launch

# A shared 2-core machine: give the page time; nothing asserts how long anything took.
expect.set_options(timeout=20_000)


# Module scope, not session: Playwright's sync API runs an event loop in the main thread while it
# is open, and every later test that calls asyncio.run() would find it running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require_chromium()
    with sync_playwright() as playwright:
        launched = launch_chromium(playwright)
        yield launched
        launched.close()


def _start(tmp_path_factory: pytest.TempPathFactory, tenants: tuple[str, ...]) -> RunningServer:
    db_path: Path = tmp_path_factory.mktemp("inspector") / "journal.db"
    return launch(db_path, keys=create_keys(db_path, tenants))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = _start(tmp_path_factory, ())
    yield running
    running.stop()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = _start(tmp_path_factory, ("acme",))
    yield running
    running.stop()


@pytest.fixture
def browsing_factory(browser: Browser) -> Iterator[BrowsingFactory]:
    opened: list[Browsing] = []

    def open_on(server: RunningServer) -> Browsing:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        browsing = Browsing(server, context, page)
        page.on("request", lambda request: browsing.requests.append(request))
        page.on("pageerror", lambda error: browsing.errors.append(str(error)))
        opened.append(browsing)
        return browsing

    yield open_on
    for browsing in opened:
        browsing.context.close()
    errors = [error for browsing in opened for error in browsing.errors]
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def inspector(browsing_factory: BrowsingFactory, server: RunningServer) -> Browsing:
    return browsing_factory(server)

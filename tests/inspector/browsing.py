"""The browser side of the inspector's tests: Debian's /usr/bin/chromium driven headless by
Playwright (a browser is never downloaded), and `Browsing`, one browser context on one server.
Without chromium the tests skip, except under CI (`CI=true`), where they fail: CI installs it
(.ci/run) and must run them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Request

from agentjournal import Journal
from server.conftest import RunningServer

CHROMIUM = Path("/usr/bin/chromium")


def chromium_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian's chromium: apt-get install chromium)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is not executable"
    return None


def require_chromium() -> None:
    problem = chromium_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{problem} (CI must run the inspector's browser tests)")
    pytest.skip(problem)


def launch_chromium(playwright: Playwright) -> Browser:
    """Headless chromium from Debian's package (Playwright's own browsers are never used)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)


@dataclass
class Browsing:
    """One browser context on one server: its `page`, every request the page made, and the
    uncaught script errors it raised."""

    server: RunningServer
    context: BrowserContext
    page: Page
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def open(self, session_id: str | None = None) -> Page:
        """Load the inspector, deep-linked to `session_id` when given."""
        hash_part = f"#/sessions/{session_id}" if session_id else ""
        self.page.goto(f"{self.server.base_url}/{hash_part}")
        return self.page

    def journal(self, tenant: str = "default") -> Journal:
        """The server's database opened with the library: another client, to the page."""
        return Journal.open(self.server.db_path, tenant=tenant)


BrowsingFactory = Callable[[RunningServer], Browsing]

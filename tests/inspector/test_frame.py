"""The page's frame in chromium: the top bar's search box is legible in light and dark colours,
the top bar stays in view while a session scrolls under it, and the page has an icon."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Literal

import httpx
import pytest
from browsing import Browsing
from playwright.sync_api import Page, expect
from scenes import long_session

from server.conftest import RunningServer

# WCAG's contrast ratio of an element's text colour (or its placeholder's) against its own
# background colour, both as chromium computed them.
CONTRAST = """([selector, pseudo]) => {
    const el = document.querySelector(selector);
    const channels = (color) => color.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const luminance = (color) => {
        const [r, g, b] = channels(color).map((c) => {
            const s = c / 255;
            return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const text = getComputedStyle(el, pseudo).color;
    const background = getComputedStyle(el).backgroundColor;
    const [light, dark] = [luminance(text), luminance(background)].sort((a, b) => b - a);
    return { text, background, ratio: (light + 0.05) / (dark + 0.05) };
}"""


def contrast(page: Page, selector: str, pseudo: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(CONTRAST, [selector, pseudo])
    return found


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_search_box_text_stands_out_from_its_background(
    inspector: Browsing, scheme: Literal["light", "dark"]
) -> None:
    page = inspector.open()
    page.emulate_media(color_scheme=scheme)
    box = page.locator("#search-query")
    box.fill("refund")
    expect(box).to_have_value("refund")
    for selector in ("#search-query", "#session-search"):
        typed = contrast(page, selector)
        assert typed["ratio"] >= 4.5, (selector, typed)
        placeholder = contrast(page, selector, "::placeholder")
        assert placeholder["ratio"] >= 4.5, (selector, placeholder)


def test_the_top_bar_stays_in_view_over_a_long_session(inspector: Browsing) -> None:
    with inspector.journal() as journal:
        session_id = long_session(journal, 400, title="tall")
    page = inspector.open(session_id)
    expect(page.locator("#live-state")).to_have_text("Live")
    newest = page.locator("#timeline > li").last
    expect(newest).to_contain_text("#400")
    expect(newest).to_be_in_viewport()
    assert page.evaluate("window.scrollY") > 2000  # opened at the bottom of a tall page
    bar = page.locator(".topbar")
    box = bar.bounding_box()
    assert box is not None
    assert box["y"] == 0, box
    expect(bar).to_be_in_viewport()
    # Nothing sticks under it: the time-travel bar and the sidebar start below it (to the pixel:
    # the page's height is fractional, and the scroll position whole).
    bottom = page.evaluate("document.querySelector('.topbar').getBoundingClientRect().bottom")
    for below in (".travel", ".sidebar"):
        top = page.evaluate(f"document.querySelector('{below}').getBoundingClientRect().top")
        assert top > bottom - 1, (below, top, bottom)
    page.locator("#search-query").click()  # not covered by anything: clickable where it is
    expect(page.locator("#search-query")).to_be_focused()
    page.evaluate("window.scrollBy(0, -1500)")
    assert page.evaluate("document.querySelector('.topbar').getBoundingClientRect().top") == 0


def test_the_page_has_an_icon(inspector: Browsing, server: RunningServer) -> None:
    page = inspector.open()
    icon = page.locator('head link[rel="icon"]')
    expect(icon).to_have_attribute("type", "image/svg+xml")
    href = icon.evaluate("link => link.href")
    assert href == f"{server.base_url}/favicon.ico"
    response = httpx.get(href, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/svg+xml"
    assert ET.fromstring(response.content).tag == "{http://www.w3.org/2000/svg}svg"
    # The page may load it (its Content-Security-Policy allows it) and chromium can draw it.
    size = page.evaluate(
        """async (href) => {
            const image = new Image();
            image.src = href;
            await image.decode();
            return [image.naturalWidth, image.naturalHeight];
        }""",
        href,
    )
    assert size == [32, 32]

"""The page's frame in chromium: the top bar's search box is legible in light and dark
colours."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from browsing import Browsing
from playwright.sync_api import Page, expect

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

"""json.js in chromium: JSON text pretty-printed with its numbers exactly as written (never read
into a JS Number), and a tool call's arguments and result shown that way in the timeline."""

from __future__ import annotations

import json
from typing import Any

from browsing import Browsing
from playwright.sync_api import Page, expect

# Each loses digits through a JS Number: 12345678901234567000, 9007199254740992, 59.9.
EXACT = ("12345678901234567890", "9007199254740993", "59.90")

PRETTY = """async ([texts, indent]) => {
    const { prettyJson } = await import('./inspector/json.js');
    return texts.map((text) => {
        try {
            return prettyJson(text, indent);
        } catch (error) {
            return error instanceof SyntaxError ? null : `threw ${error}`;
        }
    });
}"""


def pretty(page: Page, *texts: str, indent: str = "  ") -> list[Any]:
    shown: list[Any] = page.evaluate(PRETTY, [list(texts), indent])
    return shown


def test_numbers_are_printed_as_written(inspector: Browsing) -> None:
    page = inspector.open()
    numbers = [*EXACT, "-0.0", "1E+400", "6.02e23", "0"]
    shown = pretty(page, f"[{', '.join(numbers)}]", *numbers)
    assert shown[0] == "[\n" + ",\n".join(f"  {n}" for n in numbers) + "\n]"
    assert shown[1:] == numbers


def test_the_layout_is_json_stringify_s(inspector: Browsing) -> None:
    page = inspector.open()
    value = {
        "a": [1, {"b": None, "c": [True, False]}, [], {}],
        "订单": 'line\nbreak "quoted" \\ \u2028 é',
        "": {"nested": {"deeper": [[]]}},
    }
    compact = json.dumps(value, ensure_ascii=True, separators=(",", ":"))  # escapes: \u8ba2…
    spaced = json.dumps(value, ensure_ascii=False, indent="\t")
    expected = page.evaluate("(text) => JSON.stringify(JSON.parse(text), null, 2)", compact)
    assert pretty(page, compact, spaced) == [expected, expected]
    assert pretty(page, compact, indent="\t")[0] == expected.replace("  ", "\t")
    assert pretty(page, " {} ", "[ ]", '"x"', "null") == ["{}", "[]", '"x"', "null"]


def test_what_is_not_json_is_refused(inspector: Browsing) -> None:
    page = inspector.open()
    bad = [
        "", " ", "{", "]", '{"a"}', '{"a" 1}', "{a: 1}", "[1,]", '{"a": 1,}', "[1 2]", "{} {}",
        "01", "1.", ".5", "+1", "--1", "1e", "NaN", "Infinity", "tru", "nul", "'a'",
        '"\\x"', '"\\u12"', '"a\nb"', '"open', "[1] x",
    ]  # fmt: skip
    assert pretty(page, *bad) == [None] * len(bad)


def test_a_tool_call_shows_its_numbers_exactly(inspector: Browsing) -> None:
    big, unsafe, price = EXACT
    arguments = f'{{"order_id": {big}, "user_id": {unsafe}, "max_price": {price}}}'
    content = f'{{"orders": [{{"id": {big}, "total": {price}, "buyer": {unsafe}}}]}}'
    with inspector.journal() as journal:
        session_id = journal.create_session("exact numbers").session_id
        journal.append_many(
            session_id,
            [
                {"type": "user_message", "payload": {"content": "find my order"}},
                {
                    "type": "tool_call",
                    "payload": {"call_id": "n1", "name": "find_order", "arguments": arguments},
                },
                {"type": "tool_result", "payload": {"call_id": "n1", "content": content}},
                {"type": "assistant_message", "payload": {"content": "found it"}},
            ],
        )
    page = inspector.open(session_id)
    call = page.locator('#timeline details[data-call-id="n1"]')
    call.locator("summary").click()
    expect(call.locator("pre.arguments")).to_have_text(
        f'{{\n  "order_id": {big},\n  "user_id": {unsafe},\n  "max_price": {price}\n}}'
    )
    expect(call.locator("pre.result")).to_have_text(
        "{\n"
        '  "orders": [\n'
        "    {\n"
        f'      "id": {big},\n'
        f'      "total": {price},\n'
        f'      "buyer": {unsafe}\n'
        "    }\n"
        "  ]\n"
        "}"
    )

"""What is searchable and how a typed query is read: `agentjournal.search_text`, no database."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentjournal.errors import InvalidArgument
from agentjournal.search_text import (
    MAX_QUERY_CHARS,
    MAX_TERMS,
    Term,
    _bigrams,
    _runs,
    event_text,
    index_text,
    parse_query,
    scores,
    snippet,
)


def test_messages_calls_results_and_session_fields_are_searchable() -> None:
    assert event_text("user_message", {"content": "order 1234"}) == "order 1234"
    assert event_text(
        "tool_call", {"call_id": "c1", "name": "lookup", "arguments": '{"n": 5}'}
    ) == ('lookup\n{"n": 5}')
    assert event_text("tool_result", {"call_id": "c1", "content": "42"}) == "42"
    created = event_text(
        "session_created", {"title": "订单客服", "metadata": {"customer": "acme", "tier": 2}}
    )
    assert created.split("\n") == ["订单客服", "customer", "acme", "tier", "2"]
    assert event_text("myapp.note", {"text": "hello", "n": 1, "flag": True}) == "hello\n1"


def test_events_without_text_index_nothing() -> None:
    assert event_text("session_forked", {"from_session_id": "s", "at_seq": 3}) == ""
    assert event_text("task_started", {"task_id": "t"}) == ""
    assert event_text("user_message", {"content": ""}) == ""


def test_unspaced_runs_become_bigrams_and_their_last_character() -> None:
    assert index_text("我的订单数量") == "我的 的订 订单 单数 数量 量"
    assert index_text("订单abc 12") == "订单 单 abc 12"
    assert index_text("plain text, untouched!") == "plain text, untouched!"


def test_query_words_are_quoted_terms_and_operators_are_words() -> None:
    query = parse_query('order AND "1234" NEAR(x) -refund OR col:value')
    assert query.fts5() == (
        '"order" AND "and" AND "1234" AND "near" AND "x" AND "refund" AND "or" AND "col"'
        ' AND "value"'
    )
    assert query.tsquery().startswith("'order' & 'and' & '1234'")


def test_chinese_queries_ask_for_bigrams_or_a_prefix() -> None:
    assert parse_query("订单").terms == (Term("订单"),)
    assert parse_query("订单数").terms == (Term("订单"), Term("单数"))
    assert parse_query("订").terms == (Term("订", prefix=True),)


def test_a_trailing_star_is_a_prefix_of_two_letters_or_more() -> None:
    assert parse_query("refu*").terms == (Term("refu", prefix=True),)
    assert parse_query("r*").terms == (Term("r"),)
    assert parse_query("refu*").fts5() == '"refu"*'
    assert parse_query("refu*").tsquery() == "'refu':*"


@pytest.mark.parametrize("text", ["", "   ", "\t\n", '"()*:^-+', "**", "\u3000"])
def test_queries_without_words_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="no words"):
        parse_query(text)


def test_long_queries_and_too_many_terms_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="at most 500"):
        parse_query("a" * 10_000)
    with pytest.raises(InvalidArgument, match="terms"):
        parse_query(" ".join(f"w{i}" for i in range(MAX_TERMS + 1)))
    with pytest.raises(InvalidArgument, match="must be text"):
        parse_query(None)


def test_snippet_marks_every_match_case_and_accent_blind() -> None:
    text = "Your Order 1234 is late; the order was placed in Zürich."
    found = snippet(text, parse_query("order zurich"))
    assert found.marked() == "Your [Order] 1234 is late; the [order] was placed in [Zürich]."


def test_snippet_cuts_long_text_around_the_first_match() -> None:
    text = "x " * 500 + "订单数量是 42" + " y" * 500
    found = snippet(text, parse_query("订单"), width=40)
    assert found.text.startswith("…")
    assert found.text.endswith("…")
    assert len(found.text) == 42
    ((start, end),) = found.highlights
    assert found.text[start:end] == "订单"


_TOKEN = re.compile(r"^[^\W_]+$")


@given(st.text(max_size=MAX_QUERY_CHARS))
def test_any_text_is_a_query_or_invalid_argument(text: str) -> None:
    try:
        query = parse_query(text)
    except InvalidArgument:
        return
    assert 1 <= len(query.terms) <= MAX_TERMS
    for term in query.terms:
        # A term holds no quote, space or operator character: quoting it is always safe.
        assert not {'"', "'", " "} & set(term.text)
        assert term.text == term.text.lower()


@given(st.text(max_size=300), st.text(min_size=1, max_size=30))
def test_snippet_highlights_lie_in_the_snippet_and_hold_the_word(text: str, word: str) -> None:
    try:
        query = parse_query(word)
    except InvalidArgument:
        return
    found = snippet(text, query, width=80)
    last = 0
    for start, end in found.highlights:
        assert last <= start < end <= len(found.text)
        last = end
    assert len(found.text) <= 82


@given(st.text(max_size=200))
def test_index_text_keeps_every_spaced_word(text: str) -> None:
    indexed = index_text(text)
    spaced = [
        w for w in re.findall(r"[^\W_]+", text) if not any("\u4e00" <= c <= "\u9fff" for c in w)
    ]
    for word in spaced:
        if all(ord(c) < 0x3040 for c in word):
            assert word in indexed


# Letters, digits, underscores, punctuation, kana, Han (BMP and beyond) and other scripts mixed.
_MIXED = st.text(
    alphabet=st.sampled_from(
        list("ab Z9_-.\n\u00e9\u0416\u3042\u30ab\u4e00\u8ba2\u5355\uf900\u3400")
    )
    | st.sampled_from(["\U00020000", "\U0003134f", "\U00031350", "\u3000", "\u00b2", "\u0663"])
    | st.characters(),
    max_size=200,
)


@given(_MIXED)
def test_index_text_is_the_runs_with_unspaced_ones_as_bigrams(text: str) -> None:
    # The definition, by the runs `snippet` and `parse_query` also use.
    runs = [" ".join(_bigrams(run)) if unspaced else run for run, unspaced, _ in _runs(text)]
    assert index_text(text) == (" ".join(runs) if any(u for _, u, _ in _runs(text)) else text)


def test_scores_favour_more_occurrences_and_shorter_texts() -> None:
    query = parse_query("refund")
    found = scores(
        ["refund refund refund, about the order", "refund, about the order", "refund " + "x" * 400],
        query,
    )
    assert found[0] > found[1] > found[2] > 0
    assert scores([], query) == []

"""Reading texts out of a stored payload without decoding it: the same answer as decoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentjournal.backends import sqlite_rows
from agentjournal.backends.sqlite_rows import call_texts, first_text
from agentjournal.events import canonical_json

# Keys that sort before and after "content" / "arguments", so the text is sometimes not first.
_OTHER_KEYS = st.sampled_from(["a", "call_id", "name", "supersedes", "usage", "zz", "arg"])
_VALUES = st.one_of(st.integers(), st.text(max_size=5), st.none())


@given(
    key=st.sampled_from(["content", "arguments"]),
    text=st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60),
    others=st.dictionaries(_OTHER_KEYS, _VALUES, max_size=3),
)
def test_first_text_reads_what_decoding_reads(key: str, text: str, others: dict[str, Any]) -> None:
    payload = {**others, key: text}
    assert first_text(canonical_json(payload), key) == text


def test_first_text_of_a_payload_without_the_key_is_none() -> None:
    assert first_text(canonical_json({"title": "x"}), "content") is None
    assert first_text(canonical_json({"content": 3}), "content") is None


def test_escapes_and_quotes_take_the_decoding_path() -> None:
    for text in ['say "hi"', "a\\b", "line\nbreak", "tab\there", "你好\u2028"]:
        assert first_text(canonical_json({"content": text, "usage": {}}), "content") == text


# A call's own fields, and others that sort before and after "name" (a LangChain "message").
_CALL_OTHERS = st.dictionaries(
    st.sampled_from(["message", "zz", "a", "metadata"]),
    st.one_of(_VALUES, st.fixed_dictionaries({"name": st.text(max_size=5)})),
    max_size=2,
)


@given(
    name=st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20),
    arguments=st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60),
    call_id=st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8),
    others=_CALL_OTHERS,
)
def test_call_texts_read_what_decoding_reads(
    name: str, arguments: str, call_id: str, others: dict[str, Any]
) -> None:
    payload = {**others, "call_id": call_id, "name": name, "arguments": arguments}
    assert call_texts(canonical_json(payload)) == (name, arguments)


def test_call_texts_of_a_payload_without_them_are_none() -> None:
    assert call_texts(canonical_json({"content": "x"})) == (None, None)
    assert call_texts(canonical_json({"arguments": 1, "name": ["x"]})) == (None, None)


def test_a_plain_call_is_read_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(payload: str) -> Any:
        raise AssertionError(f"decoded {payload}")

    monkeypatch.setattr(sqlite_rows, "_decode", no_decoding)
    call = canonical_json({"arguments": "", "call_id": "c1", "name": "lookup"})
    assert call_texts(call) == ("lookup", "")

"""Reading a text out of a stored payload without decoding it: the same answer as decoding."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentjournal.backends.sqlite_rows import first_text
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

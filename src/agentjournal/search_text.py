"""Full-text search, the pure part: which text of an event is searchable, how Chinese and Japanese
text is cut into terms, how what a user typed becomes a query, and where a hit's words are in a
snippet. Standard library only; the backends store and match what this module produces.

Users type words, not a query language. A query is the words of the text (runs of letters and
digits, as SQLite's `unicode61` tokenizer cuts them); every other character separates words, so
quotes, parentheses, `AND`/`OR`/`NEAR`/`NOT` and column filters are searched as plain words or not
at all. A word followed by `*` matches as a prefix. Every word must occur in the event.

Text without spaces (Han, Hiragana, Katakana) is indexed as overlapping two-character terms,
plus the last character of each run alone: "我的订单数量" is indexed as
`我的 的订 订单 单数 数量 量`. A query of two or more such characters asks for all of its
bigrams; a single character asks for the terms that start with it (docs/decisions.md: why not
FTS5's trigram tokenizer).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from agentjournal.errors import InvalidArgument

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "SEARCHED_TYPES",
    "SearchFilter",
    "SearchQuery",
    "Snippet",
    "Term",
    "event_text",
    "index_text",
    "parse_query",
    "scores",
    "snippet",
]

MAX_QUERY_CHARS: Final = 500
MAX_TERMS: Final = 16
# Of a very large payload (a tool result can be 1 MiB) only the start is searchable: indexing
# cost follows the text, and a hit past this point would have no useful snippet anyway.
MAX_INDEXED_CHARS: Final = 32_768

# Core types whose payload holds text someone would look for; namespaced types (integrations,
# applications) have their string values indexed. Task lifecycle events and forks hold ids.
SEARCHED_TYPES: Final = frozenset(
    {
        "session_created",
        "session_updated",
        "user_message",
        "assistant_message",
        "system_message",
        "tool_call",
        "tool_result",
        "context_compacted",
        "task_created",
        "task_completed",
        "task_failed",
    }
)
_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "session_created": ("title", "model", "system_prompt", "metadata"),
    "session_updated": ("title", "metadata"),
    "user_message": ("content",),
    "assistant_message": ("content",),
    "system_message": ("content",),
    "tool_call": ("name", "arguments"),
    "tool_result": ("content",),
    "context_compacted": ("summary",),
    "task_created": ("type", "input"),
    "task_completed": ("output",),
    "task_failed": ("error",),
}


def event_text(type: str, payload: Mapping[str, Any]) -> str:
    """The searchable text of an event: message contents, a tool call's name and arguments, a
    result, a session's title and metadata (keys and values), a compaction's summary, a task's
    type, input, output or error, and the string values of a namespaced event. '' for an event
    with nothing to search (seq and ids are not text)."""
    if type in _FIELDS:
        parts = [_flatten(payload.get(name)) for name in _FIELDS[type]]
    elif "." in type:
        parts = [_flatten(payload, keys=False)]
    else:
        return ""
    return "\n".join(part for part in parts if part)[:MAX_INDEXED_CHARS]


def _flatten(value: Any, *, keys: bool = True) -> str:
    """Strings and numbers of a JSON value, one per line (object keys too, if `keys`)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            found.append(json.dumps(item))
        elif isinstance(item, Mapping):
            for key, inner in reversed(list(item.items())):
                stack.append(inner)
                if keys:
                    stack.append(str(key))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
    return "\n".join(found)


_UNSPACED_RANGES: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
)
_UNSPACED: Final = re.compile(f"[{_UNSPACED_RANGES}]")


def _is_unspaced(char: str) -> bool:
    """Scripts written without spaces between words: Han (CJK ideographs) and Japanese kana."""
    return _UNSPACED.match(char) is not None


# A run of unspaced characters, or a run of other letters and digits ([^\W_]: str.isalnum).
_RUN: Final = re.compile(f"([{_UNSPACED_RANGES}]+)|((?:(?![{_UNSPACED_RANGES}])[^\\W_])+)")


def _runs(text: str) -> list[tuple[str, bool, int]]:
    """Maximal runs of word characters: (run, unspaced, start offset); an unspaced run is split
    from spaced letters it touches ("订单abc" is "订单" and "abc")."""
    return [(m[0], m.lastindex == 1, m.start()) for m in _RUN.finditer(text)]


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


# `_RUN`'s runs without a lookahead per character: [^\W_] less the unspaced ranges, in one
# class. `index_text` needs neither offsets nor match objects, so it takes `findall`'s pairs
# (a third less time for a message a third Chinese; tests hold it to the `_runs` definition).
_RUN_PAIRS: Final = re.compile(f"([{_UNSPACED_RANGES}]+)|([^\\W_{_UNSPACED_RANGES}]+)")


def index_text(text: str) -> str:
    """What the backends tokenize: `text` with every unspaced run replaced by its bigrams (and
    its last character), space separated; spaced words are kept as they are."""
    if _UNSPACED.search(text) is None:
        return text
    out: list[str] = []
    for unspaced, spaced in _RUN_PAIRS.findall(text):
        if spaced:
            out.append(spaced)
        elif len(unspaced) == 1:
            out.append(unspaced)
        else:
            out.append(" ".join([unspaced[i : i + 2] for i in range(len(unspaced) - 1)]))
            out.append(unspaced[-1])
    return " ".join(out)


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """What a search keeps besides its terms: sessions of these statuses, events of these types
    (None: any), created at or after `since` and before `until` (unix ms; None: no bound)."""

    statuses: tuple[str, ...]
    types: tuple[str, ...] | None = None
    since: int | None = None
    until: int | None = None


@dataclass(frozen=True, slots=True)
class Term:
    """One term every hit must hold: a whole word (`prefix` False) or the start of one."""

    text: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A parsed query. `words` are what the user typed (for highlighting), `terms` what the index
    is asked for (an unspaced word becomes its bigrams)."""

    words: tuple[str, ...]
    terms: tuple[Term, ...]

    def fts5(self) -> str:
        """An FTS5 MATCH expression: each term a quoted string (so no operator can appear), all
        of them required."""
        return " AND ".join(f'"{t.text}"' + ("*" if t.prefix else "") for t in self.terms)

    def tsquery(self) -> str:
        """A PostgreSQL `to_tsquery('simple', ...)` expression, quoted the same way."""
        return " & ".join(f"'{t.text}'" + (":*" if t.prefix else "") for t in self.terms)


def parse_query(text: object) -> SearchQuery:
    """What the user typed, as a query; `InvalidArgument` if it is not text, is longer than
    `MAX_QUERY_CHARS`, has no word at all, or more than `MAX_TERMS` terms."""
    if not isinstance(text, str):
        raise InvalidArgument(f"query must be text, got {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgument(
            f"query is {len(text)} characters; at most {MAX_QUERY_CHARS} are searched"
        )
    words: list[str] = []
    terms: list[Term] = []
    for run, unspaced, start in _runs(text):
        word = run.lower()
        starred = text[start + len(run) : start + len(run) + 1] == "*"
        words.append(word)
        if unspaced:
            if len(word) == 1:
                terms.append(Term(word, prefix=True))
            else:
                terms += [Term(word[i : i + 2]) for i in range(len(word) - 1)]
        else:
            terms.append(Term(word, prefix=starred and len(word) >= 2))
    unique = tuple(dict.fromkeys(terms))
    if not unique:
        raise InvalidArgument("query has no words to search for (letters or digits)")
    if len(unique) > MAX_TERMS:
        raise InvalidArgument(
            f"query has {len(unique)} terms; at most {MAX_TERMS} (a Chinese word of n "
            "characters counts n - 1)"
        )
    return SearchQuery(tuple(dict.fromkeys(words)), unique)


# BM25's saturation and length normalisation (its usual constants).
_K1: Final = 1.2
_B: Final = 0.75


def scores(texts: list[str], query: SearchQuery) -> list[float]:
    """A relevance score for each of `texts` (each holds every term of `query`): BM25's form,
    with each word's count in the text (as a substring, case-blind) and the text's length
    against the average of `texts`. Every text holds every word, so each word weighs the same
    (an IDF would be equal for all of them). Higher is more relevant."""
    if not texts:
        return []
    lengths = [max(1, len(text)) for text in texts]
    average = sum(lengths) / len(lengths)
    found = []
    for text, length in zip(texts, lengths, strict=True):
        lowered = text.lower()
        norm = _K1 * (1 - _B + _B * length / average)
        total = 0.0
        for word in query.words:
            count = lowered.count(word)
            total += count * (_K1 + 1) / (count + norm) if count else 0.0
        found.append(round(total, 6))
    return found


@dataclass(frozen=True, slots=True)
class Snippet:
    """A piece of an event's text around its first match. `highlights` are (start, end) offsets
    of the matched words in `text`, in Unicode code points, ascending and not overlapping."""

    text: str
    highlights: tuple[tuple[int, int], ...]

    def marked(self, before: str = "[", after: str = "]") -> str:
        """`text` with each highlight wrapped in `before` and `after`."""
        out, last = [], 0
        for start, end in self.highlights:
            out += [self.text[last:start], before, self.text[start:end], after]
            last = end
        out.append(self.text[last:])
        return "".join(out)


@cache
def _fold(char: str) -> str:
    """A character as the index compares it: lowercased, accents removed (one char for one)."""
    base = unicodedata.normalize("NFD", char)[:1] or char
    folded = base.lower()
    return folded if len(folded) == 1 else char.lower()[:1] or char


def _fold_text(text: str) -> str:
    """`text` folded character by character (the same length, so offsets carry over)."""
    if text.isascii():
        return text.lower()
    return "".join(map(_fold, text))


def _matches(text: str, query: SearchQuery) -> list[tuple[int, int]]:
    folded = _fold_text(text)
    prefixes = {t.text for t in query.terms if t.prefix}
    spaced = {_fold_text(w): w in prefixes for w in query.words if not _is_unspaced(w[0])}
    unspaced = [w for w in query.words if _is_unspaced(w[0])]
    spans: list[tuple[int, int]] = []
    for run, is_unspaced, start in _runs(folded):
        if is_unspaced:
            for word in unspaced:
                found = run.find(word)
                while found >= 0:
                    spans.append((start + found, start + found + len(word)))
                    found = run.find(word, found + len(word))
        elif run in spaced or any(
            prefix and run.startswith(word) for word, prefix in spaced.items()
        ):
            spans.append((start, start + len(run)))
    merged: list[tuple[int, int]] = []
    for span in sorted(spans):
        if merged and span[0] < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], span[1]))
        else:
            merged.append(span)
    return merged


def snippet(text: str, query: SearchQuery, width: int = 160) -> Snippet:
    """At most `width` characters of `text` around its first match, with every match in them
    highlighted; '…' marks a cut. The start of the text if no word is found in it (a match of
    a prefix or bigram the highlighter does not see)."""
    spans = _matches(text, query)
    first = spans[0][0] if spans else 0
    start = max(0, min(first - width // 4, len(text) - width))
    end = min(len(text), start + width)
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    shown = [
        (max(s, start) - start + len(head), min(e, end) - start + len(head))
        for s, e in spans
        if s < end and e > start
    ]
    return Snippet(head + text[start:end] + tail, tuple(shown))

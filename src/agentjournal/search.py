"""`Journal.search`: the arguments checked, the backend asked for a window of matches, the window
ranked and cut into pages, each hit given its session and a snippet.

Ranking every event that holds a common word costs one score per match, and database scores
(FTS5's bm25) count a word's matches across the whole index first: at a million events that is
tens of milliseconds per common word. So a search ranks within a window: the newest `WINDOW`
matching events (of this tenant, after the filters), scored here by `search_text.scores` (the
same on both backends); after a full window's pages come the next older window's. Pages are
stable: a cursor names the window's newest event and the offset in it, so events appended
meanwhile never shift a page. The best hits of a huge history are found by narrowing (`since`,
`until`, `types`, `session_status`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentjournal.arguments import check_int
from agentjournal.backends import Storage
from agentjournal.errors import InvalidArgument
from agentjournal.events import check_type
from agentjournal.search_text import SearchFilter, event_text, parse_query, scores, snippet

__all__ = ["MAX_SEARCH_LIMIT", "WINDOW", "SearchHit", "SearchPage", "run_search"]

WINDOW: Final = 1000
MAX_SEARCH_LIMIT: Final = 100
_CURSOR = re.compile(r"^([0-9]{1,19})\.([0-9]{1,4})$")

_STATUSES: Final = {
    None: ("active", "archived"),
    "active": ("active",),
    "archived": ("archived",),
    "deleted": ("deleted",),
    "all": ("active", "archived", "deleted"),
}


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One event that holds every word of the query. `snippet` is a piece of its text;
    `highlights` are (start, end) offsets of the matched words in it, in code points. `score`:
    higher is more relevant (comparable within one search only)."""

    session_id: str
    seq: int
    type: str
    created_at: int
    score: float
    session_title: str
    snippet: str
    highlights: tuple[tuple[int, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "type": self.type,
            "created_at": self.created_at,
            "score": self.score,
            "session_title": self.session_title,
            "snippet": self.snippet,
            "highlights": [list(span) for span in self.highlights],
        }


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of hits, best first; `next_cursor` asks for the next page (None: no more)."""

    hits: list[SearchHit]
    next_cursor: str | None


def _cursor(value: object) -> tuple[int | None, int]:
    if value is None:
        return None, 0
    match = _CURSOR.match(value) if isinstance(value, str) else None
    if match is None or int(match[1]) >= 2**63 or int(match[2]) >= WINDOW:
        raise InvalidArgument(f"cursor {value!r:.60} is not one that search returned")
    return int(match[1]), int(match[2])


def _filter(
    session_status: str | None,
    since: int | None,
    until: int | None,
    types: Sequence[str] | None,
) -> SearchFilter:
    if session_status not in _STATUSES:
        raise InvalidArgument("session_status must be active, archived, deleted, all or None")
    for value, name in ((since, "since"), (until, "until")):
        if value is not None:
            check_int(value, name, 0)
    if types is not None:
        if isinstance(types, str) or not isinstance(types, Sequence) or not types:
            raise InvalidArgument("types must be a non-empty list of event types")
        types = tuple(check_type(t) for t in types)
    return SearchFilter(_STATUSES[session_status], types, since, until)


def run_search(
    storage: Storage,
    tenant: str,
    query: str,
    *,
    session_status: str | None,
    since: int | None,
    until: int | None,
    types: Sequence[str] | None,
    limit: int,
    cursor: str | None,
) -> SearchPage:
    parsed = parse_query(query)
    where = _filter(session_status, since, until, types)
    check_int(limit, "limit", 1, MAX_SEARCH_LIMIT)
    top, offset = _cursor(cursor)
    window = storage.search(tenant, parsed, where, top, WINDOW)
    if not window:
        return SearchPage([], None)
    top = window[0] if top is None else top
    events = storage.events_by_id(tenant, window)  # purged meanwhile: left out
    texts = [event_text(e.type, e.payload) for e in events]
    # Best first; among equal scores, newest first (a stable order for the cursor's offset).
    ranked = sorted(
        zip(scores(texts, parsed), events, texts, strict=True),
        key=lambda hit: (-hit[0], -hit[1].event_id),
    )
    page = ranked[offset : offset + limit]
    if offset + limit < len(ranked):
        next_cursor: str | None = f"{top}.{offset + limit}"
    elif len(window) == WINDOW:
        next_cursor = f"{window[-1] - 1}.0"
    else:
        next_cursor = None
    titles: dict[str, str] = {}
    hits = []
    for score, event, text in page:
        if event.session_id not in titles:
            session = storage.session(tenant, event.session_id)
            titles[event.session_id] = session.title if session else ""
        shown = snippet(text, parsed)
        hits.append(
            SearchHit(
                event.session_id,
                event.seq,
                event.type,
                event.created_at,
                score,
                titles[event.session_id],
                shown.text,
                shown.highlights,
            )
        )
    return SearchPage(hits, next_cursor)

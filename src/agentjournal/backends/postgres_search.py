"""Which way a PostgreSQL search looks for its window, from the planner's statistics.

GIN cannot give matches newest first: for a common word it builds a bitmap of every match and
sorts them (hundreds of milliseconds at a million events), while the newest few thousand index
rows, read by primary key and tested one by one, already hold the window. For a rare word that
walk finds too little and GIN is fast. So the search asks PostgreSQL how common the query is:
`EXPLAIN` of the match beside the whole table, whose row estimates come from the `tsvector`
column's element statistics (`pg_stats.most_common_elems`, which an ordinary role cannot read
itself when row-level security is on, but the planner uses on its behalf). A table never
analyzed has no such statistics: then the search walks a fixed number of rows, and if they hold
too few matches walks further by the rate it saw (`longer_walk`) or asks GIN, a bounded cost
either way (never the planner's own guess, which took 110 s once).
The same goes for a query with a prefix (`warehou*`, or one Chinese character): the planner's
estimate for a prefix is no sum of the words it matches (2 % for a prefix of a word in half the
events, measured), and GIN then merged every match, ~500 ms at a million events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

# Index rows walked when there is no estimate (a word in more than size / RECENT_ROWS of the
# events, 5 % for a window of 1,000, is found among them).
RECENT_ROWS: Final = 20_000
# The most rows a walk reads on an estimate: ~0.5 µs a row tested as the scan reads it, against
# GIN's heap fetch per match (~6 µs): a word in 1 % of the events still walks (a window of 1,000).
MAX_WALK: Final = 200_000
# A walk reads this many times the rows that should hold the window by the estimate: the
# estimate is a sample's, and the filters (status, type, time) can drop some matches.
WALK_MARGIN: Final = 2.0

ESTIMATE_SQL: Final = (
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM search_index WHERE terms @@ to_tsquery('simple', %s)"
    " UNION ALL SELECT 1 FROM search_index"
)
ANALYZED_SQL: Final = (
    "SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables"
    " WHERE relid = 'search_index'::regclass"
)


@dataclass(frozen=True)
class SearchPlan:
    """`walk`: how many of the newest index rows to test first (0: none); then, if they held
    fewer matches than the window, the GIN index. `why` is for the debug log."""

    walk: int
    why: str


def choose_plan(fraction: float | None, size: int) -> SearchPlan:
    """The plan for a query matching `fraction` of the index rows by the statistics (None:
    no estimate to trust), for a window of `size` rows."""
    if fraction is None:
        return SearchPlan(RECENT_ROWS, "no estimate: a fixed walk, then GIN")
    if fraction > 0:
        rows = math.ceil(WALK_MARGIN * size / fraction)
        if rows <= MAX_WALK:
            return SearchPlan(rows, f"estimated {fraction:.1%} of rows: walk")
    return SearchPlan(0, f"estimated {fraction:.2%} of rows: GIN")


def longer_walk(walked: int, found: int, size: int) -> int:
    """After a walk of `walked` rows found `found` < `size` matches: the rows a second walk
    should read by that rate (a walk's own sample, where there was no estimate), or 0 when it
    would pass `MAX_WALK` (then GIN)."""
    if found == 0:
        return 0
    rows = math.ceil(WALK_MARGIN * size * walked / found)
    return rows if walked < rows <= MAX_WALK else 0


def match_fraction(explained: Any) -> float:
    """The share of rows the query matches, from `ESTIMATE_SQL`'s plan: its Append node's two
    children are the match and the whole table."""
    plan = explained[0]["Plan"] if isinstance(explained, list) else explained["Plan"]
    match, everything = (float(child["Plan Rows"]) for child in plan["Plans"][:2])
    return min(1.0, match / everything) if everything > 0 else 0.0

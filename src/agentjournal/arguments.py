"""Checks of the arguments every verb takes (ids, counts, fractions, names), and the clock the
verbs stamp events with. Each check returns the value or raises `InvalidArgument`."""

from __future__ import annotations

import re
import time
from typing import Any, Final

from agentjournal.errors import InvalidArgument

__all__ = [
    "MAX_INT",
    "MAX_PAGE",
    "check_fraction",
    "check_id",
    "check_int",
    "check_name",
    "now_ms",
]

MAX_PAGE: Final = 10_000
MAX_INT: Final = 2**63 - 1  # seqs, positions and counts are 64-bit in every database we support
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_id(value: Any, what: str) -> str:
    """Ids and task types: 1-128 of letters, digits and _.:-, starting with a letter or digit."""
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidArgument(
            f"{what} must be 1-128 characters of letters, digits and _.:- "
            f"(starting with a letter or digit), got {value!r:.80}"
        )
    return value


def check_name(value: Any, what: str) -> str:
    """Free-form names (a worker's): printable text, 1-255 characters."""
    if not isinstance(value, str) or not 0 < len(value) <= 255 or not value.isprintable():
        raise InvalidArgument(f"{what} must be 1-255 printable characters, got {value!r:.80}")
    return value


def check_fraction(value: Any, what: str, low: float, high: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(f"{what} must be a number from {low} to {high}, got {value!r:.40}")
    return float(value)


def check_int(value: Any, what: str, low: int, high: int = MAX_INT) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidArgument(f"{what} must be an integer >= {low}, got {value!r:.40}")
    if value > high:
        raise InvalidArgument(f"{what} must be at most {high}, got {value}")
    return value

"""The paging of a live stream (`subscribe`, `subscribe_all`): where the next page starts, which
events of a page to hand on, and whether the stream ends or waits for a commit. `Journal` reads
and waits blocking, `AsyncJournal` awaiting; both page through `Follow`, so they page alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from agentjournal.events import Event

__all__ = ["PAGE_SIZE", "Follow", "follow_feed", "follow_session"]

PAGE_SIZE: Final = 500  # events read per round trip; a shorter page means the stream caught up

Cursor = TypeVar("Cursor")


@dataclass
class Follow(Generic[Cursor]):
    """A live stream between two pages. Read the page after `cursor`, hand on what `take` returns,
    then stop if `ended`, or wait for a commit first if `waits`."""

    cursor: Cursor
    cursor_of: Callable[[Event], Cursor]
    ends_with_session: bool  # a session's stream ends after the event that deletes the session
    deleted: bool = False  # the session was deleted before the stream began: end once caught up
    ended: bool = field(default=False, init=False)
    waits: bool = field(default=False, init=False)

    def take(self, page: Sequence[Event]) -> Sequence[Event]:
        caught_up = len(page) < PAGE_SIZE
        for index, event in enumerate(page):
            if self.ends_with_session and event.ends_session_stream:
                page = page[: index + 1]
                self.ended = True
                break
        if page:
            self.cursor = self.cursor_of(page[-1])
        if caught_up and self.deleted:
            self.ended = True
        self.waits = caught_up and not self.ended
        return page


def follow_session(after: int, *, deleted: bool) -> Follow[int]:
    return Follow(after, lambda event: event.seq, ends_with_session=True, deleted=deleted)


def follow_feed(after: str | None) -> Follow[str | None]:
    return Follow(after, lambda event: event.position, ends_with_session=False)

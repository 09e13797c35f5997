"""The read verbs of `Journal`: a session, its events, the tenant's feed, the transcript and the
tool calls, replay and context. They read the projections, or fold events with the pure replay;
none writes. `TaskVerbs`, then `Journal`, stand on them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agentjournal.arguments import MAX_PAGE, check_id, check_int
from agentjournal.errors import InvalidArgument, SessionNotFound
from agentjournal.events import Event
from agentjournal.journal_core import JournalCore
from agentjournal.projection import Message, Session, ToolCall
from agentjournal.replay import (
    REPLAY_FORMATS,
    ContextFit,
    Format,
    ReplayFormat,
    Tokenizer,
    fit_context,
    replay,
)
from agentjournal.search import SearchPage, run_search

__all__ = ["ReadVerbs"]


class ReadVerbs(JournalCore):
    def get_session(self, session_id: str) -> Session:
        session = self.storage.session(self.tenant, check_id(session_id, "session_id"))
        if session is None:
            raise SessionNotFound(session_id)
        return session

    def events(
        self,
        session_id: str,
        *,
        after: int = 0,
        before: int | None = None,
        last: int | None = None,
        around: int | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """A page of the session's events, always oldest first, read through the (session, seq)
        index so that any page costs the same however long the session is.

        - `after=N` (default 0): up to `limit` events with seq > N.
        - `last=K`: the newest K events (of those above `after` and below `before`, when given),
          like `messages(last=)`; then `before=page[0].seq` reads the K before those.
        - `before=N`: the newest `limit` events below seq N.
        - `around=N`: `limit` events centred on seq N (N itself, about half before it and the
          rest after, more on one side where the other runs out): where to open a session at a
          search hit or a time-travel point.

        `limit` is 1-10,000, default 100; give it or `last`, not both. InvalidArgument for a
        negative or non-integer seq, `before <= after`, or `around` with another cursor."""
        sid = check_id(session_id, "session_id")
        check_int(after, "after", 0)
        if last is not None:
            if limit is not None:
                raise InvalidArgument("give last or limit, not both: last is the page's size")
            size = check_int(last, "last", 1, MAX_PAGE)
        else:
            size = 100 if limit is None else check_int(limit, "limit", 1, MAX_PAGE)
        if around is not None:
            check_int(around, "around", 1)
            if before is not None or last is not None or after:
                raise InvalidArgument("around takes no after, before or last: it is the cursor")
            events = self._around(sid, around, size)
        elif before is None and last is None:
            events = self.storage.events(self.tenant, sid, after=after, limit=size)
        else:
            if before is not None:
                check_int(before, "before", 1)
                if before <= after:
                    raise InvalidArgument(f"before must be above after, got {before} <= {after}")
            events = self.storage.events(
                self.tenant,
                sid,
                after=after,
                until=None if before is None else before - 1,
                limit=size,
                newest_first=True,
            )[::-1]
        if not events:
            self.get_session(session_id)
        return events

    def _around(self, session_id: str, seq: int, size: int) -> list[Event]:
        """`size` events around `seq`: two index range reads of at most `size` rows each."""
        older = self.storage.events(
            self.tenant, session_id, until=seq - 1, limit=size, newest_first=True
        )[::-1]
        newer = self.storage.events(self.tenant, session_id, after=seq - 1, limit=size)
        keep_older = min(len(older), max(size // 2, size - len(newer)))
        return older[len(older) - keep_older :] + newer[: size - keep_older]

    def search(
        self,
        query: str,
        *,
        session_status: str | None = None,
        since: int | None = None,
        until: int | None = None,
        types: Sequence[str] | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> SearchPage:
        """Events of this tenant whose text holds every word of `query` (message contents, tool
        names, arguments and results, session titles and metadata), best first, with a snippet
        each. Words, not syntax: punctuation separates words, and a trailing `*` matches a
        prefix (docs/search.md).

        Filters: `session_status` as in `sessions()` (None: active and archived), `since` /
        `until` (unix ms, `created_at` in [since, until)), `types` (event types). `limit` hits
        per page (at most 100); the next page: `cursor=page.next_cursor`, with the same query
        and filters. Ranks within the newest 1,000 matches at a time. `InvalidArgument` for a
        query without words or over 500 characters; `SearchUnavailable` where the database
        cannot search (SQLite without FTS5)."""
        return run_search(
            self.storage,
            self.tenant,
            query,
            session_status=session_status,
            since=since,
            until=until,
            types=types,
            limit=limit,
            cursor=cursor,
        )

    def events_all(self, *, after: str | None = None, limit: int = 100) -> list[Event]:
        """A page of the tenant's global feed after `after`, in ascending position order.

        Resuming after the last position seen gives every committed event exactly once, each
        session's in seq order. On SQLite that is commit order; on PostgreSQL positions follow
        (transaction id, event_id) and an event shows once every older transaction has ended
        (docs/postgres.md)."""
        check_int(limit, "limit", 1, MAX_PAGE)
        return self.storage.events_all(self.tenant, _after(after), limit)

    def feed_head(self, *, after: str | None = None) -> str | None:
        """The position of the tenant's newest committed event; None if it has none after
        `after`. On PostgreSQL `events_all` may not show it yet (while an older transaction
        runs): reading the feed until this position gives everything committed before."""
        return self.storage.feed_head(self.tenant, _after(after))

    def position_key(self, position: str) -> int:
        """A sort key: positions of this journal compare as their keys do, so the feed is in
        ascending key order and `events_all(after=p)` gives the events whose key is above `p`'s.
        Any `after` the feed accepts has one ('' is before every event); InvalidArgument for a
        string that is not a position of this journal. Positions themselves stay opaque: compare
        keys, never the strings or their `int()`."""
        if not isinstance(position, str):
            raise InvalidArgument("position must be a string, as Event.position gives it")
        return self.storage.position_key(position)

    def messages(self, session_id: str, *, last: int | None = None) -> list[Message]:
        """The transcript (user, assistant and system messages, corrections applied); with
        `last=N`, the latest N in chronological order."""
        if last is not None:
            check_int(last, "last", 1, MAX_PAGE)
        messages = self.storage.messages(self.tenant, check_id(session_id, "session_id"), last)
        if not messages:
            self.get_session(session_id)
        return messages

    def tool_calls(
        self,
        session_id: str,
        *,
        call_ids: Collection[str] | None = None,
        open_only: bool = False,
    ) -> list[ToolCall]:
        """The session's tool calls with their results, if they have one, in call order: all, or
        those named in `call_ids`, or (`open_only`) those still waiting for their result."""
        if call_ids is not None and (
            isinstance(call_ids, str) or not all(isinstance(c, str) for c in call_ids)
        ):
            raise InvalidArgument("call_ids must be a collection of call id strings")
        calls = self.storage.tool_calls(
            self.tenant,
            check_id(session_id, "session_id"),
            call_ids=call_ids,
            open_only=open_only,
        )
        if not calls:
            self.get_session(session_id)
        return calls

    def replay(
        self, session_id: str, *, until: int | None = None, format: ReplayFormat = "openai"
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The message list a model accepts, folded from the journal (as of `until`, if given):
        OpenAI Chat Completions messages, `format="anthropic"` `{system, messages}`, or
        `format="responses"` OpenAI Responses API input items."""
        if until is not None:
            check_int(until, "until", 1)
        if format not in REPLAY_FORMATS:
            raise InvalidArgument("format must be 'openai', 'anthropic' or 'responses'")
        session = self.get_session(session_id)
        compaction = self.storage.newest_compaction(self.tenant, session_id, until)
        events = [compaction] if compaction else []
        floor = compaction.payload["until_seq"] if compaction else 0
        events += self.storage.events(self.tenant, session_id, after=floor, until=until)
        return replay(events, until=until, format=format, system_prompt=session.system_prompt)

    def context(
        self,
        session_id: str,
        *,
        max_tokens: int,
        tokenizer: Tokenizer | None = None,
        format: Format = "openai",
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The longest suffix of the replay that fits `max_tokens`, cut only before a user
        message. Reads backwards from the newest event, so its cost follows what it returns."""
        return self.context_fit(
            session_id, max_tokens=max_tokens, tokenizer=tokenizer, format=format
        ).messages

    def context_fit(
        self,
        session_id: str,
        *,
        max_tokens: int,
        tokenizer: Tokenizer | None = None,
        format: Format = "openai",
    ) -> ContextFit:
        check_int(max_tokens, "max_tokens", 1)
        session = self.get_session(session_id)
        compaction = self.storage.newest_compaction(self.tenant, session_id, None)
        floor = compaction.payload["until_seq"] if compaction else 0
        head = [compaction] if compaction else []
        window: list[Event] = []
        upper, page = session.last_seq, 64
        while True:
            older = self.storage.events(
                self.tenant, session_id, after=floor, until=upper, limit=page, newest_first=True
            )
            window[:0] = reversed(older)
            complete = len(older) < page or (bool(window) and window[0].seq == floor + 1)
            users = [
                e.seq for e in window if e.type == "user_message" and "supersedes" not in e.payload
            ]
            if complete or users:
                fit = fit_context(
                    head + window,
                    max_tokens=max_tokens,
                    complete=complete,
                    system_prompt=session.system_prompt,
                    tokenizer=tokenizer,
                    format=format,
                )
                if complete or fit.cut_seq != users[0]:
                    return fit
            upper = window[0].seq - 1
            page = min(page * 4, 4096)

    def open_turns(self, *, all_tenants: bool = False) -> list[Session]:
        """Sessions (not deleted) whose last turn has not ended: a user message, tool call or
        tool result after the newest assistant message. Read through a partial index."""
        return self.storage.open_turns(None if all_tenants else self.tenant)


def _after(after: str | None) -> str | None:
    """`after` if it can be a feed position (the backend says whether it is one of its own)."""
    if after is not None and not isinstance(after, str):
        raise InvalidArgument("after must be a position string, as Event.position gives it")
    return after

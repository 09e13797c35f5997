"""Where `JournalSessionService` finds ADK sessions in the journal: a session's newest events and
the state they point at, the shared `app:` and `user:` state, and the directories that list an
app's users and a user's sessions. Nothing is remembered between calls: every answer is read
from the journal, so other processes' writes are always seen. See `adk_events` for the events.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from agentjournal.errors import Conflict, SessionNotFound
from agentjournal.events import Event, NewEvent
from agentjournal.integrations.adk_events import (
    APP_STATE,
    SESSION_LISTED,
    SESSION_OPENED,
    SESSION_UNLISTED,
    USER_LISTED,
    USER_STATE,
    carried,
    journal_id,
)
from agentjournal.journal import Journal

__all__ = [
    "Head",
    "SharedChange",
    "append_with_shared",
    "exists",
    "listed_names",
    "newest",
    "open_session",
    "relist_session",
    "session_state",
    "shared_state",
    "unlist_session",
]

_PAGE = 200  # events read per step when reading a session backwards
_DIRECTORY_PAGE = 1000
_ATTEMPTS = 100  # rounds lost to other writers of a shared state before giving up


class Head:
    """What the newest events of an ADK session say: its newest journal event, the time of its
    last update, and where its own state is (`state`, or the seq of the event holding it)."""

    __slots__ = ("last", "state", "state_seq", "updated")

    def __init__(self, last: Event, updated: float, state_seq: int, state: Any) -> None:
        self.last, self.updated, self.state_seq, self.state = last, updated, state_seq, state

    @property
    def marker(self) -> str:
        """The session's revision, as a session object remembers it: the seq and the event id
        (never reused) of its newest event."""
        return marker_of(self.last)


def marker_of(event: Event) -> str:
    return f"{event.seq}:{event.event_id}"


def newest(
    journal: Journal, jid: str, count: int | None, after: float | None
) -> tuple[Head, list[dict[str, Any]]] | None:
    """The session's head and its newest `count` ADK events (all with None) whose time is not
    before `after`, newest first: read backwards, a page at a time, so the cost follows what is
    returned, not the session's length. None if it is not an ADK session; `SessionNotFound` if
    there is no such session."""
    carriers: list[dict[str, Any]] = []
    head: Head | None = None
    # A first page the size of what is asked (a few more: the batch's other events), then
    # doubling: the latest 20 events cost about 20 events' reading, whatever the length.
    size = min(_PAGE, count + 2) if count is not None else 32 if after is not None else _PAGE
    page = journal.events(jid, last=size)
    if not page:
        # Created (on PostgreSQL) between the read of its events and the check that it
        # exists: as of the read, there was no such session.
        raise SessionNotFound(jid)
    last = page[-1]
    while True:
        for event in reversed(page):
            if event.seq == 1:
                if head is None:  # no ADK event yet: the creation says it all
                    metadata = event.payload.get("metadata", {})
                    if metadata.get("integration") != "adk":
                        return None
                    if metadata.get("pending") and last.seq == 1:
                        return None  # its creation did not finish (see `open_session`)
                    head = Head(last, metadata["created"], 1, metadata.get("state", {}))
                break
            adk = carried(event)
            if adk is None:
                continue
            timestamp = adk["event"].get("timestamp", 0.0)
            if head is None:
                head = Head(last, timestamp, adk["state_seq"], adk.get("state"))
            # Older than asked for: the rest are older still (ADK's in-memory service stops
            # at the same event).
            if (after is not None and timestamp < after) or (
                count is not None and len(carriers) >= count
            ):
                break
            carriers.append(adk)
        else:
            if page[0].seq > 1:
                size = min(_PAGE, size * 2)
                page = journal.events(jid, last=size, before=page[0].seq)
                continue
        break
    if head is None:
        return None
    return head, carriers


def session_state(journal: Journal, jid: str, head: Head) -> dict[str, Any]:
    """The session's own state as of `head`."""
    if head.state is not None:
        return dict(head.state)
    event = journal.events(jid, after=head.state_seq - 1, limit=1)[0]
    if event.seq == 1:
        return dict(event.payload.get("metadata", {}).get("state", {}))
    adk = carried(event)
    return dict(adk.get("state", {})) if adk is not None else {}


def shared_state(journal: Journal, jid: str) -> dict[str, Any]:
    """An app's or a user's state: the newest event of its session ({} if none)."""
    try:
        found = journal.events(jid, last=1)
    except SessionNotFound:
        return {}
    state = found[0].payload.get("state") if found else None
    return dict(state) if isinstance(state, dict) else {}


class SharedChange:
    """What `append_with_shared` adds to a write: the `app:` and `user:` deltas of one app and
    user (either may be empty), and the states they gave once written."""

    __slots__ = ("app_delta", "app_name", "app_state", "user_delta", "user_id", "user_state")

    def __init__(
        self,
        app_name: str,
        user_id: str,
        app_delta: dict[str, Any],
        user_delta: dict[str, Any],
    ) -> None:
        self.app_name, self.user_id = app_name, user_id
        self.app_delta, self.user_delta = app_delta, user_delta
        self.app_state: dict[str, Any] = {}
        self.user_state: dict[str, Any] = {}


def append_with_shared(
    journal: Journal,
    batches: Mapping[str, Sequence[NewEvent]],
    expected_seq: Mapping[str, int],
    change: SharedChange,
    moved: Callable[[], None],
) -> dict[str, list[Event]]:
    """Append `batches` (at `expected_seq`) and the app's and the user's new state in **one**
    transaction (`Journal.append_across`): the shared state is read, merged with the deltas
    and appended at the seq read. If another writer came first (`Conflict`), `moved()` is
    asked whether that makes the whole write wrong (it raises) and otherwise it is all done
    again over the new shared state. Sets `change.app_state` and `change.user_state`."""
    app_jid = journal_id("app", change.app_name)
    user_jid = journal_id("user", change.app_name, change.user_id)
    scopes = {
        app_jid: (APP_STATE, {"app_name": change.app_name}, change.app_delta),
        user_jid: (
            USER_STATE,
            {"app_name": change.app_name, "user_id": change.user_id},
            change.user_delta,
        ),
    }
    for attempt in range(_ATTEMPTS):
        states: dict[str, dict[str, Any]] = {}
        writes: dict[str, Sequence[NewEvent]] = dict(batches)
        seqs = dict(expected_seq)
        for jid, (kind, scope, delta) in scopes.items():
            if not delta:
                states[jid] = shared_state(journal, jid)
                continue
            last_seq, state = _shared_head(journal, jid, kind, scope)
            states[jid] = {**state, **delta}
            writes[jid] = [NewEvent(kind, {**scope, "state": states[jid]})]
            seqs[jid] = last_seq
        try:
            appended = _append(journal, writes, seqs)
        except Conflict:
            pass
        else:
            change.app_state, change.user_state = states[app_jid], states[user_jid]
            return appended
        moved()
        # A shared state moved on: wait a random while, longer each time (at most 50 ms), so
        # that contending writers stop meeting at the same moment.
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
    raise Conflict("ADK app or user state: other writers kept appending; try again")


def _append(
    journal: Journal, writes: Mapping[str, Sequence[NewEvent]], seqs: Mapping[str, int]
) -> dict[str, list[Event]]:
    """Several sessions' batches in one transaction; one session's alone as any append is
    written (group commit's shared path for appends)."""
    if len(writes) > 1:
        return journal.append_across(writes, expected_seq=seqs)
    return {
        jid: journal.append_many(jid, batch, expected_seq=seqs.get(jid))
        for jid, batch in writes.items()
    }


def _shared_head(
    journal: Journal, jid: str, kind: str, scope: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The last seq and the state of an app's or a user's state session, created on first
    use: one read of its newest event."""
    found: list[Event] = []
    with suppress(SessionNotFound):
        found = journal.events(jid, last=1)
    if not found:
        # Not there, or (on PostgreSQL) created by another writer between the read of its
        # events and the check that it exists: seen whole once `_ensure` has seen it.
        _ensure(journal, jid, f"ADK {kind}", {"integration": "adk", **scope})
        found = journal.events(jid, last=1)
    state = found[0].payload.get("state")
    return found[0].seq, dict(state) if isinstance(state, dict) else {}


def listed_names(journal: Journal, jid: str, name: str) -> list[str]:
    """The names a directory session leaves listed (`name`: the payload key), in first-listed
    order ([] if the directory does not exist)."""
    names: dict[str, None] = {}
    after = 0
    while True:
        try:
            page = journal.events(jid, after=after, limit=_DIRECTORY_PAGE)
        except SessionNotFound:
            return []
        for event in page:
            value = event.payload.get(name)
            if not isinstance(value, str):
                continue
            if event.type == SESSION_UNLISTED:
                names.pop(value, None)
            else:
                names.setdefault(value, None)
        if len(page) < _DIRECTORY_PAGE:
            return list(names)
        after = page[-1].seq


def open_session(
    journal: Journal,
    app_name: str,
    user_id: str,
    sid: str,
    change: SharedChange,
    taken: Callable[[], None],
) -> Event:
    """Make the created (pending) session an ADK session: its `adk.session_opened`, its name in
    its user's directory (and the user's in the app's, on the user's first session) and the
    app's and the user's state it was created with, in **one** transaction. `taken()` raises if
    another writer opened it first. Returns the `adk.session_opened` event."""
    jid = journal_id("session", app_name, user_id, sid)
    directory = journal_id("sessions", app_name, user_id)
    users = journal_id("users", app_name)
    scope = {"integration": "adk", "app_name": app_name, "user_id": user_id}
    # The directories exist before (empty, they list nothing); the user is listed with the
    # first session the user's directory lists, in the same transaction.
    first = _ensure(journal, directory, "ADK sessions", scope) == 1
    batches: dict[str, list[NewEvent]] = {
        jid: [NewEvent(SESSION_OPENED, {})],
        directory: [NewEvent(SESSION_LISTED, {"session_id": sid})],
    }
    if first:
        _ensure(journal, users, "ADK users", {"integration": "adk", "app_name": app_name})
        batches[users] = [NewEvent(USER_LISTED, {"user_id": user_id})]
    appended = append_with_shared(journal, batches, {jid: 1}, change, taken)
    return appended[jid][-1]


def relist_session(journal: Journal, app_name: str, user_id: str, sid: str) -> None:
    """List an open session again in its user's directory (which exists: it was listed)."""
    journal.append(journal_id("sessions", app_name, user_id), SESSION_LISTED, {"session_id": sid})


def unlist_session(journal: Journal, app_name: str, user_id: str, sid: str) -> None:
    """Take a session's name off its user's directory, if the directory ever listed one: a
    directory with nothing but its creation is the sign that its user is not listed yet, which
    the user's first session (`open_session`) reads."""
    directory = journal_id("sessions", app_name, user_id)
    try:
        listed = journal.get_session(directory).last_seq > 1
    except SessionNotFound:
        return
    if listed:
        journal.append(directory, SESSION_UNLISTED, {"session_id": sid})


def exists(journal: Journal, jid: str) -> bool:
    try:
        journal.get_session(jid)
    except SessionNotFound:
        return False
    return True


def _ensure(journal: Journal, jid: str, title: str, metadata: dict[str, Any]) -> int:
    """The last seq of a shared or directory session, created on first use."""
    try:
        return journal.get_session(jid).last_seq
    except SessionNotFound:
        pass
    try:
        return journal.create_session(
            title, session_id=jid, metadata=metadata, idempotency_key=f"adk:{jid}"
        ).last_seq
    except Conflict:  # created by another writer meanwhile
        return journal.get_session(jid).last_seq

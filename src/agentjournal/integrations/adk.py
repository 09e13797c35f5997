"""agentjournal as Google ADK's session service (`pip install 'agentjournal[adk]'`).

```python
from google.adk.runners import Runner
from agentjournal.integrations.adk import JournalSessionService

async with JournalSessionService.open("agent.db") as sessions:  # or postgresql://...
    runner = Runner(agent=agent, app_name="shop", session_service=sessions)
```

Every ADK session is a journal session and every ADK `Event` one atomic batch of the journal's
own events (a user message, the agent's text, its tool calls and results) with the event itself
on the last of them, written in one transaction with the `app:` and `user:` state it changes, so
`get_session` returns exactly the events appended and the CLI, the inspector, search and replay
show the conversation. `agentjournal.integrations.
adk_events` says what is stored where; docs/integrations.md has the whole story.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

import agentjournal.integrations.adk_store as store
from agentjournal.aio import AsyncJournal
from agentjournal.errors import (
    Conflict,
    InvalidArgument,
    InvalidEvent,
    PayloadTooLarge,
    SessionNotFound,
)
from agentjournal.events import NewEvent
from agentjournal.integrations.adk_events import (
    ADK_EVENT,
    call_ids,
    event_batch,
    journal_id,
    session_metadata,
)
from agentjournal.integrations.worker import in_worker, journals
from agentjournal.journal import Durability, Journal

__all__ = ["SCHEME", "JournalSessionService", "from_uri", "register"]

T = TypeVar("T")
SCHEME = "agentjournal"  # session service URIs for ADK's CLI: agentjournal:<journal URL>
_MARKER = re.compile(r"[0-9]+:[0-9]+")
_CREATE_ATTEMPTS = 100  # creations undone by concurrent deletes before giving up
_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class JournalSessionService(BaseSessionService):
    """ADK's `BaseSessionService` over a `Journal` or an `AsyncJournal`, in its tenant.

    As ADK's `DatabaseSessionService`: `app:` state is shared by an app's sessions, `user:`
    state by a user's sessions in that app, `temp:` state is never stored; a session loaded
    before someone else appended to it raises `StaleSessionError` on append (reload it), while
    appends through one session object in this process take turns. Unlike it, `get_session`
    reads only the events it returns (`num_recent_events`, `after_timestamp`), `list_sessions`
    of one user reads that user's sessions only, and events keep the order they were appended
    in (not re-sorted by timestamp).
    """

    def __init__(self, journal: Journal | AsyncJournal) -> None:
        self.journal, self._async = journals(journal)
        self._owned = False
        # journal session id -> its append lock and how many appends hold or wait for it
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @classmethod
    def open(
        cls, url: str, *, tenant: str = "default", durability: Durability = "full"
    ) -> JournalSessionService:
        """A service over a journal of its own at `url` (a SQLite path or `postgresql://…`),
        closed by `close()` or by leaving `async with`."""
        service = cls(Journal.open(url, tenant=tenant, durability=durability))
        service._owned = True
        return service

    async def close(self) -> None:
        """Close the journal if `open` opened it (a journal handed in stays open)."""
        if self._owned:
            self.journal.close()

    async def __aenter__(self) -> JournalSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- BaseSessionService -----------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        _check_names(app_name, user_id, session_id, optional=("session_id",))
        if state is not None and not isinstance(state, Mapping):
            raise InvalidArgument("state must be a dict")
        if state is not None and not all(isinstance(key, str) for key in state):
            raise InvalidArgument("state keys must be strings")
        sid = platform_uuid.new_uuid() if session_id is None else session_id
        deltas = _session_util.extract_json_safe_state_delta(dict(state or {}))
        return await self._call(self._create, app_name, user_id, sid, deltas)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        _check_names(app_name, user_id, session_id)
        if config is not None and not isinstance(config, GetSessionConfig):
            raise InvalidArgument("config must be a GetSessionConfig")
        return await self._call(self._get, app_name, user_id, session_id, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        _check_names(app_name, user_id, optional=("user_id",))
        return await self._call(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _check_names(app_name, user_id, session_id)
        await self._call(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        _check_names(app_name, user_id)
        jid = journal_id("user", app_name, user_id)
        return await self._call(store.shared_state, self.journal, jid)

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        """Append `event` to the session; `StaleSessionError` (nothing written) if the session
        was changed in storage since `session` was read or last appended to."""
        if not isinstance(session, Session) or not isinstance(event, AdkEvent):
            raise InvalidArgument("append_event takes an ADK Session and an ADK Event")
        if event.partial:
            return event
        # As ADK's services: temp state reaches the session object, never the store.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
        async with self._lock(journal_id("session", *_names(session))):
            marker = await self._call(self._append, session, event, deltas)
        session._storage_update_marker = marker
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    # -- the work, in a worker thread -------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await in_worker(self._async, fn, *args)

    @asynccontextmanager
    async def _lock(self, key: str) -> AsyncIterator[None]:
        """Appends to one session through this service take turns (as ADK's own services'):
        another process is met by the journal's `expected_seq` instead. The lock is dropped
        when no append holds or waits for it."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def _create(
        self, app_name: str, user_id: str, sid: str, deltas: dict[str, dict[str, Any]]
    ) -> Session:
        created = platform_time.get_time()
        metadata = session_metadata(app_name, user_id, sid, created, deltas["session"])
        # What the journal would refuse (an id or a state it cannot hold) is refused before
        # anything is written: the session's creation holds the names and its state.
        self.journal.prepare_batch([NewEvent(ADK_EVENT, {"title": sid, "metadata": metadata})])
        # Two writes: the session, pending (no read finds it), then in one transaction its
        # opening, its listing and the `app:` and `user:` state it sets. A crash in between
        # leaves a pending session, which creating it again (as ADK callers do after an error)
        # opens if it was asked with the same state.
        for _ in range(_CREATE_ATTEMPTS):
            try:
                return self._create_once(app_name, user_id, sid, deltas, metadata)
            except SessionNotFound:
                continue  # deleted by a delete meanwhile: the id is free again
        raise Conflict(f"ADK session {sid}: deleted as often as it was created; try again")

    def _create_once(
        self,
        app_name: str,
        user_id: str,
        sid: str,
        deltas: dict[str, dict[str, Any]],
        metadata: dict[str, Any],
    ) -> Session:
        jid = journal_id("session", app_name, user_id, sid)
        made = False
        try:
            existing = self.journal.get_session(jid)
        except SessionNotFound:
            try:
                existing = self.journal.create_session(sid, session_id=jid, metadata=metadata)
            except Conflict:
                raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
            made = True
        if existing.last_seq != 1 or not existing.metadata.get("pending"):
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        if not made and existing.metadata.get("state") != deltas["session"]:
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        created = existing.metadata.get("created", metadata["created"])

        def taken() -> None:
            if self.journal.get_session(jid).last_seq != 1:
                raise AlreadyExistsError(f"Session with id {sid} already exists.")

        shared = store.SharedChange(app_name, user_id, deltas["app"], deltas["user"])
        try:
            opened = store.open_session(self.journal, app_name, user_id, sid, shared, taken)
        except (InvalidEvent, PayloadTooLarge):
            if made:  # the shared state it sets is refused: it leaves nothing
                with suppress(SessionNotFound):
                    self.journal.purge_session(jid, actor="adk")
            raise
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merge(deltas["session"], shared.app_state, shared.user_state),
            last_update_time=created,
        )
        session._storage_update_marker = store.marker_of(opened)
        return session

    def _get(
        self, app_name: str, user_id: str, sid: str, config: GetSessionConfig | None
    ) -> Session | None:
        jid = journal_id("session", app_name, user_id, sid)
        count = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        try:
            found = store.newest(self.journal, jid, count, after)
        except SessionNotFound:
            return None
        if found is None:
            return None
        head, carriers = found
        events = [AdkEvent.model_validate(c["event"]) for c in reversed(carriers)]
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merge(
                store.session_state(self.journal, jid, head),
                store.shared_state(self.journal, journal_id("app", app_name)),
                store.shared_state(self.journal, journal_id("user", app_name, user_id)),
            ),
            events=events,
            last_update_time=head.updated,
        )
        session._storage_update_marker = head.marker
        return session

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        if user_id is None:
            users = store.listed_names(self.journal, journal_id("users", app_name), "user_id")
        else:
            users = [user_id]
        app_state = store.shared_state(self.journal, journal_id("app", app_name))
        sessions: list[Session] = []
        for user in users:
            user_state = store.shared_state(self.journal, journal_id("user", app_name, user))
            directory = journal_id("sessions", app_name, user)
            for sid in store.listed_names(self.journal, directory, "session_id"):
                jid = journal_id("session", app_name, user, sid)
                try:
                    found = store.newest(self.journal, jid, 0, None)
                except SessionNotFound:
                    continue  # deleted, or its creation did not finish
                if found is None:
                    continue
                head = found[0]
                session = Session(
                    id=sid,
                    app_name=app_name,
                    user_id=user,
                    state=_merge(
                        store.session_state(self.journal, jid, head), app_state, user_state
                    ),
                    last_update_time=head.updated,
                )
                session._storage_update_marker = head.marker
                sessions.append(session)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: str, user_id: str, sid: str) -> None:
        jid = journal_id("session", app_name, user_id, sid)
        with suppress(SessionNotFound):
            self.journal.purge_session(jid, actor="adk")
        store.unlist_session(self.journal, app_name, user_id, sid)
        # A session of this id created since the purge may have been listed before the name
        # was taken off: if it is there now, list it again (its own listing, if it comes later,
        # comes after the unlisting and stands).
        try:
            again = store.newest(self.journal, jid, 0, None)
        except SessionNotFound:
            again = None
        if again is not None:
            store.relist_session(self.journal, app_name, user_id, sid)

    def _append(self, session: Session, event: AdkEvent, deltas: dict[str, dict[str, Any]]) -> str:
        """Append the event's batch at the seq the session object was read or last appended
        at; the session object's new revision marker."""
        jid = journal_id("session", *_names(session))
        marker = session._storage_update_marker
        exact = marker is not None and _MARKER.fullmatch(marker) is not None
        # The newest events say where the state is (one indexed read; the append's commit
        # costs far more), and whether anyone appended since the session object was read.
        try:
            found = store.newest(self.journal, jid, 0 if exact else 1, None)
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        if found is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        head, carriers = found
        if exact:
            # The seq and the event id of the session's newest event: a session deleted and
            # created again to the same length has another.
            if marker != head.marker:
                raise StaleSessionError(_STALE)
        else:
            # A session this service did not give out (built by hand, or read by another
            # service): current if its newest event is the session's newest, as ADK's
            # DatabaseSessionService decides for sessions without its marker.
            newest = carriers[0]["event"].get("id") if carriers else None
            if newest != (session.events[-1].id if session.events else None):
                raise StaleSessionError(_STALE)
        expected = head.last.seq
        state = None
        if deltas["session"]:
            state = {**store.session_state(self.journal, jid, head), **deltas["session"]}
        data = event.model_dump(mode="json", exclude_none=True)
        named = call_ids(data)
        calls = self.journal.tool_calls(jid, call_ids=named) if named else []
        batch = event_batch(
            data,
            first_seq=expected + 1,
            state_seq=head.state_seq,
            state=state,
            used_calls={c.call_id for c in calls},
            open_calls={c.call_id for c in calls if c.status == "pending"},
        )
        # The event and the `app:` and `user:` state it changes are one transaction: a crash
        # leaves all of them or none. Another writer of the shared state is waited out (the
        # write is done again over its state); another writer of this session makes it stale.
        shared = store.SharedChange(
            session.app_name, session.user_id, deltas["app"], deltas["user"]
        )

        def moved() -> None:
            if self.journal.get_session(jid).last_seq != expected:
                raise StaleSessionError(_STALE)

        try:
            appended = store.append_with_shared(
                self.journal, {jid: batch}, {jid: expected}, shared, moved
            )[jid]
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        return store.marker_of(appended[-1])


def from_uri(uri: str, **kwargs: Any) -> JournalSessionService:
    """ADK's session service factory for `agentjournal:<journal URL>` (`agentjournal:agent.db`,
    `agentjournal:/srv/agent.db`, `agentjournal:postgresql://host/db`): a service over a
    journal of its own. `tenant` and `durability` may be given; `agents_dir`, which ADK's CLI
    passes to every factory, is ignored."""
    prefix = f"{SCHEME}:"
    if not isinstance(uri, str) or not uri.startswith(prefix) or uri == prefix:
        raise InvalidArgument(f"an agentjournal session service URI is {prefix}<journal URL>")
    kwargs.pop("agents_dir", None)
    unknown = set(kwargs) - {"tenant", "durability"}
    if unknown:
        raise InvalidArgument(f"unknown options for JournalSessionService: {sorted(unknown)}")
    return JournalSessionService.open(uri[len(prefix) :], **kwargs)


def register() -> None:
    """Make `agentjournal:` session service URIs known to ADK's CLI (`adk web`, `adk api_server`,
    `adk run` with `--session_service_uri agentjournal:agent.db`): call it from the agents
    directory's `services.py`, which the CLI loads."""
    from google.adk.cli.service_registry import get_service_registry

    get_service_registry().register_session_service(SCHEME, from_uri)


def _names(session: Session) -> tuple[str, str, str]:
    return session.app_name, session.user_id, session.id


def _check_names(
    app_name: Any, user_id: Any, session_id: Any = "", *, optional: tuple[str, ...] = ()
) -> None:
    """ADK's names are any strings; None only for those ADK lets be None (`optional`)."""
    for what, value in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        if not isinstance(value, str) and not (value is None and what in optional):
            raise InvalidArgument(f"{what} must be a string, got {value!r:.80}")


def _merge(
    session_state: Mapping[str, Any], app_state: Mapping[str, Any], user_state: Mapping[str, Any]
) -> dict[str, Any]:
    merged = dict(session_state)
    merged.update({State.APP_PREFIX + key: value for key, value in app_state.items()})
    merged.update({State.USER_PREFIX + key: value for key, value in user_state.items()})
    return merged

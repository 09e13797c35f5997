"""`Journal`, the one public façade: every verb validates its input, runs the rules inside the
storage's write transaction, and reads through the projections or the pure fold."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from agentjournal import live, projection, transfer, verify
from agentjournal import tasks as transitions
from agentjournal.appends import AppendRequest, append_group
from agentjournal.arguments import MAX_INT, MAX_PAGE, check_id, check_int, now_ms
from agentjournal.backends import EventRow, WriteTx
from agentjournal.backends.urls import Durability as Durability  # re-exported: integrations use it
from agentjournal.backends.urls import describe, migrate_storage, open_storage
from agentjournal.errors import (
    Conflict,
    InvalidArgument,
    InvalidEvent,
    JournalError,
    SearchUnavailable,
    SessionNotFound,
)
from agentjournal.events import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    Event,
    NewEvent,
    PreparedEvent,
    check_idempotency_key,
)
from agentjournal.keys import ApiKeys
from agentjournal.projection import Session
from agentjournal.replication_verbs import ReplicationVerbs
from agentjournal.rules import resolve_retry
from agentjournal.transfer import ImportReport
from agentjournal.verify import VerifyReport

__all__ = ["MAX_INT", "MAX_PAGE", "Journal", "now_ms"]

EventLike = NewEvent | Mapping[str, Any]

_STATUSES = {
    None: ("active", "archived"),
    "active": ("active",),
    "archived": ("archived",),
    "deleted": ("deleted",),
    "all": ("active", "archived", "deleted"),
}


def new_session_id() -> str:
    return "sess_" + base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


class Journal(ReplicationVerbs):
    """Durable, append-only memory for agents, scoped to one tenant.

    >>> journal = Journal.open("agent.db")                      # doctest: +SKIP
    >>> session = journal.create_session("订单客服")              # doctest: +SKIP
    >>> journal.append(session.session_id, "user_message", {"content": "你好"})  # doctest: +SKIP
    """

    _owns_storage = True  # False for a `for_tenant` view: the storage is its parent's to close
    _release: Callable[[], None] | None = None  # set by `open`: lets go of a shared storage

    @classmethod
    def open(
        cls,
        url: str | Path,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        create: bool = True,
    ) -> Journal:
        """Open (creating if needed) a journal: a SQLite file path or `sqlite:///path`, or a
        `postgresql://` URL (docs/postgres.md: options `schema`, `pooler`, `pool_size`).
        `create=False` refuses (`InvalidArgument`) a SQLite file that does not exist, so that a
        mistyped path does not leave an empty database behind.

        `durability="full"` (the default) survives power loss; `"normal"` survives a process
        crash but may lose the last acknowledged commits on power loss (never half of one; on
        PostgreSQL, `synchronous_commit = off`).
        """
        check_id(tenant, "tenant")
        storage, release = open_storage(url, durability, create=create)
        try:
            journal = cls(storage, tenant=tenant, max_payload_bytes=max_payload_bytes)
        except BaseException:
            release()
            raise
        journal._release = release
        return journal

    @staticmethod
    def migrate(url: str | Path, *, grant_to: Sequence[str] = ()) -> None:
        """Create the journal at `url`, or bring its schema to this version, and return.

        On PostgreSQL, connect as the role that owns the schema (it creates the tables, and may
        alter them); `grant_to` names the application roles that `Journal.open` will connect
        as: each gets the row privileges the journal needs and nothing more, so that row-level
        security binds it (docs/postgres.md, "Roles"). Roles granted once are granted again by
        every later migration. On SQLite, `open` migrates too; this only does it without
        keeping the file open.
        """
        migrate_storage(url, grant_to)

    @staticmethod
    def describe(url: str | Path) -> str:
        """Where `url` points, for a person to read (a log line, a start-up banner): `SQLite
        /absolute/path`, or `PostgreSQL host:port/database` with the schema and role the URL
        names. Never its password. `InvalidArgument` for what `open` would refuse as a URL."""
        return describe(url)

    def for_tenant(self, tenant: str) -> Journal:
        """The same database, scoped to another tenant (closing it leaves the storage open)."""
        other = Journal(self.storage, tenant=tenant, max_payload_bytes=self.max_payload_bytes)
        other._owns_storage = False
        return other

    def close(self) -> None:
        """Let go of the storage: closed once no other journal of this process holds it (every
        `open` of one database shares its storage; a second close does nothing more). A
        journal made over a storage it was handed closes that storage."""
        if self._owns_storage:
            (self._release or self.storage.close)()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------

    def create_session(
        self,
        title: str = "",
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """Create a session; its seq 1 is `session_created`. A repeated idempotency key returns
        the session it created (a different request under the same key is a `Conflict`)."""
        return self.create_session_ex(
            title,
            model=model,
            system_prompt=system_prompt,
            metadata=metadata,
            session_id=session_id,
            idempotency_key=idempotency_key,
        )[0]

    def create_session_ex(
        self,
        title: str = "",
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Session, bool]:
        """`create_session`, also telling whether it created (False: an idempotent repeat)."""
        payload: dict[str, Any] = {"title": title}
        for key, value in (("model", model), ("system_prompt", system_prompt)):
            if value is not None:
                payload[key] = value
        if metadata is not None:
            payload["metadata"] = metadata
        event = self._prepare("session_created", payload, idempotency_key, reserved=True)
        sid = new_session_id() if session_id is None else check_id(session_id, "session_id")
        created_at = now_ms()

        def repeat_of(tx: WriteTx) -> str | None:
            """The session this key created before, checked to be this same request."""
            key = event.idempotency_key
            if key is None:
                return None
            existing = tx.session_by_key(self.tenant, key)
            if existing is not None:
                found = tx.events_by_keys([(self.tenant, existing, key)])
                resolve_retry([event], {k: e for (_, _, k), e in found.items()})
            return existing

        def work(tx: WriteTx) -> tuple[str, bool]:
            existing = repeat_of(tx)
            if existing is not None:
                return existing, False
            if tx.session_states([(self.tenant, sid)]):
                # On PostgreSQL each statement sees what has committed by then: the session may
                # be a concurrent creation with this key that committed after the look-up above.
                existing = repeat_of(tx)
                if existing is not None:
                    return existing, False
                raise Conflict(f"session id {sid!r} is already taken")
            tx.insert_session(self.tenant, sid, created_at, event.idempotency_key)
            tx.insert_events([EventRow(self.tenant, sid, 1, event, created_at)])
            return sid, True

        created_id, created = self.storage.write(work)
        return self.get_session(created_id), created

    def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """Change title, metadata (replaced whole) or status (active / archived / deleted)."""
        payload: dict[str, Any] = {}
        for key, value in (("title", title), ("metadata", metadata), ("status", status)):
            if value is not None:
                payload[key] = value
        event = self._prepare("session_updated", payload, idempotency_key, reserved=True)
        if status != "deleted":
            self._append(session_id, [event], None)
            return self.get_session(session_id)
        check_id(session_id, "session_id")

        def work(tx: WriteTx) -> None:
            # The session's open tasks are cancelled first, in the same transaction, so its
            # stream (which ends with the deletion) shows them.
            state = self._state(tx, session_id)
            key = event.idempotency_key
            retry = key is not None and bool(tx.events_by_keys([(self.tenant, session_id, key)]))
            if state is not None and state.status != "deleted" and not retry:
                cancels = [
                    {"task_id": t.task_id, "reason": "session deleted"}
                    for t in tx.session_tasks((self.tenant, session_id))
                    if t.status in transitions.OPEN_STATUSES
                ]
                self._append_tx(tx, session_id, [("task_cancelled", c) for c in cancels])
            self._append_tx(tx, session_id, [event])

        self.storage.write(work)
        return self.get_session(session_id)

    def delete_session(self, session_id: str) -> Session:
        """Soft delete: the session stays readable, leaves `sessions()`, and accepts no appends
        but undelete (`update_session(status="active")`)."""
        return self.update_session(session_id, status="deleted")

    def purge_session(self, session_id: str, *, actor: str = "library") -> int:
        """Hard delete for privacy: every row of the session goes; an audit row (who, when, how
        many events, no content) stays. Returns the number of events deleted."""
        check_id(session_id, "session_id")
        at = now_ms()

        def work(tx: WriteTx) -> int:
            if self._state(tx, session_id) is None:
                raise SessionNotFound(session_id)
            return tx.purge(self.tenant, session_id, actor, at)

        count = self.storage.write(work)
        self.storage.checkpoint()
        return count

    MAX_SEARCH = 200  # characters of a `sessions(search=...)`; the HTTP API's bound too

    def sessions(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        search: str | None = None,
    ) -> list[Session]:
        """Sessions by most recent activity. `status` None means active and archived; "deleted"
        or "all" include deleted ones. Next page: `cursor=page[-1].last_position`, with the
        same `status` and `search`.

        `search` keeps the sessions whose title or id contains it, in any case (both sides
        lowercased, non-ASCII letters too); it is matched as given, not trimmed, and `%` or `_`
        are plain characters. An empty `search` matches every session, as None does. At most
        200 characters, with no U+0000 or lone surrogate (no title can hold them)."""
        if status not in _STATUSES:
            raise InvalidArgument("status must be active, archived, deleted, all or None")
        check_int(limit, "limit", 1, MAX_PAGE)
        if search is not None:
            if not isinstance(search, str) or len(search) > self.MAX_SEARCH:
                raise InvalidArgument(
                    f"search must be text of at most {self.MAX_SEARCH} characters, "
                    f"got {search!r:.80}"
                )
            if "\x00" in search:
                raise InvalidArgument("search must not hold U+0000")
            try:
                search.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate: neither database takes it
                raise InvalidArgument("search is not valid Unicode (lone surrogate?)") from exc
        return self.storage.sessions(self.tenant, _STATUSES[status], limit, cursor, search)

    # -- appends ----------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> Event:
        """Append one event and return it once it is durable."""
        event = self._prepare(type, {} if payload is None else payload, idempotency_key)
        return self._append(session_id, [event], expected_seq)[0][0]

    def append_many(
        self,
        session_id: str,
        events: Sequence[EventLike],
        *,
        expected_seq: int | None = None,
    ) -> list[Event]:
        """Append a batch atomically: all of it is written, or nothing."""
        return self._append(session_id, self.prepare_batch(events), expected_seq)[0]

    def prepare_batch(self, events: Sequence[EventLike]) -> list[PreparedEvent]:
        if isinstance(events, str | bytes | Mapping) or not isinstance(events, Sequence):
            raise InvalidEvent("append_many takes a list of events")
        if not events:
            raise InvalidEvent("append_many needs at least one event")
        prepared = []
        for index, item in enumerate(events):
            type_: Any
            payload: Any
            key: Any
            if isinstance(item, NewEvent):
                type_, payload, key = item.type, item.payload, item.idempotency_key
            elif isinstance(item, Mapping):
                unknown = item.keys() - {"type", "payload", "idempotency_key"}
                if unknown:
                    raise InvalidEvent(f"events[{index}] has unknown fields {sorted(unknown)}")
                type_, payload, key = (
                    item.get("type"),
                    item.get("payload", {}),
                    item.get("idempotency_key"),
                )
            else:
                raise InvalidEvent(f"events[{index}] must be a NewEvent or a mapping")
            try:
                prepared.append(self._prepare(type_, payload, key))
            except InvalidEvent as exc:
                raise type(exc)(f"events[{index}]: {exc}") from exc
        return prepared

    def append_many_ex(
        self,
        session_id: str,
        events: Sequence[EventLike],
        *,
        expected_seq: int | None = None,
    ) -> tuple[list[Event], bool]:
        """`append_many`, also telling whether the events were written now (False: this was an
        idempotent retry and they are the originals)."""
        return self._append(session_id, self.prepare_batch(events), expected_seq)

    def append_across(
        self,
        batches: Mapping[str, Sequence[EventLike]],
        *,
        expected_seq: Mapping[str, int] | None = None,
    ) -> dict[str, list[Event]]:
        """Append a batch to each of several sessions of this tenant in one transaction: every
        batch is written, or none (`batches` maps a session id to its events, written in that
        order). Each batch is checked as `append_many` checks it: its session's rules, its
        idempotency keys, and `expected_seq[session_id]` where given. The first batch refused
        raises its error, and nothing of any batch is written. Returns each session's events
        (for a batch that was an idempotent retry, the originals)."""
        if not isinstance(batches, Mapping) or not batches:
            raise InvalidArgument("append_across takes a non-empty mapping of session id to events")
        seqs: Mapping[str, int] = {} if expected_seq is None else expected_seq
        if not isinstance(seqs, Mapping):
            raise InvalidArgument("expected_seq must be a mapping of session id to seq")
        strays = [sid for sid in seqs if sid not in batches]
        if strays:
            raise InvalidArgument(f"expected_seq names sessions without a batch: {strays!r:.200}")
        created_at = now_ms()
        requests: list[AppendRequest] = []
        for session_id, events in batches.items():
            check_id(session_id, "session_id")
            try:
                prepared = self.prepare_batch(events)
            except InvalidEvent as exc:
                raise type(exc)(f"session {session_id}: {exc}") from exc
            seq = seqs.get(session_id)
            if seq is not None:
                check_int(seq, "expected_seq", 0)
            requests.append(AppendRequest(self.tenant, session_id, prepared, seq, created_at))

        def work(tx: WriteTx) -> dict[str, list[Event]]:
            appended: dict[str, list[Event]] = {}
            for request, outcome in zip(requests, append_group(tx, requests), strict=True):
                if isinstance(outcome, JournalError):
                    raise outcome  # rolls back the batches accepted with it
                appended[request.session_id] = outcome[0]
            return appended

        return self.storage.write(work)

    def compact(
        self,
        session_id: str,
        until_seq: int,
        summary: str,
        *,
        idempotency_key: str | None = None,
    ) -> Event:
        """Record that the model's context up to `until_seq` is replaced by `summary`."""
        return self.compact_ex(session_id, until_seq, summary, idempotency_key=idempotency_key)[0]

    def compact_ex(
        self,
        session_id: str,
        until_seq: int,
        summary: str,
        *,
        idempotency_key: str | None = None,
    ) -> tuple[Event, bool]:
        """`compact`, also telling whether the event was written now (False: an idempotent
        retry, and this is the original)."""
        payload = {"summary": summary, "until_seq": until_seq}
        event = self._prepare("context_compacted", payload, idempotency_key)
        events, created = self._append(session_id, [event], None)
        return events[0], created

    def fork(
        self,
        session_id: str,
        at_seq: int | None = None,
        *,
        title: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """A new session holding copies of events 1..at_seq (default: all), then
        `session_forked`. From then on the two are independent."""
        return self.fork_ex(session_id, at_seq, title=title, idempotency_key=idempotency_key)[0]

    def fork_ex(
        self,
        session_id: str,
        at_seq: int | None = None,
        *,
        title: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Session, bool]:
        """`fork`, also telling whether it forked now (False: an idempotent repeat)."""
        check_id(session_id, "session_id")
        if at_seq is not None:
            check_int(at_seq, "at_seq", 1)
        key = check_idempotency_key(idempotency_key)
        new_id = new_session_id()
        created_at = now_ms()

        def work(tx: WriteTx) -> tuple[str, bool]:
            if key is not None:
                existing = tx.session_by_key(self.tenant, key)
                if existing is not None:
                    found = tx.events_by_keys([(self.tenant, existing, key)])
                    original = found.get((self.tenant, existing, key))
                    if (
                        original is None
                        or original.type != "session_forked"
                        or original.payload["from_session_id"] != session_id
                        or (at_seq is not None and original.payload["at_seq"] != at_seq)
                    ):
                        raise Conflict(f"idempotency key {key!r} was used for another request")
                    return existing, False
            state = self._state(tx, session_id)
            if state is None:
                raise SessionNotFound(session_id)
            at = state.last_seq if at_seq is None else at_seq
            if at > state.last_seq:
                raise InvalidArgument(
                    f"at_seq {at} is past the session's last seq {state.last_seq}"
                )
            open_calls = tx.calls_open_at((self.tenant, session_id), at)
            if open_calls:
                raise Conflict(
                    f"forking at seq {at} would leave tool call {open_calls[0][0]!r} without its "
                    "result; fork at a point where every call has its result"
                )
            forked = self._prepare(
                "session_forked", {"from_session_id": session_id, "at_seq": at}, key, reserved=True
            )
            extra = [forked]
            if title is not None:
                extra.append(self._prepare("session_updated", {"title": title}, reserved=True))
            tx.insert_session(self.tenant, new_id, created_at, key)
            tx.copy_events(self.tenant, session_id, new_id, at)
            tx.insert_events(
                [
                    EventRow(self.tenant, new_id, seq, event, created_at)
                    for seq, event in enumerate(extra, start=at + 1)
                ]
            )
            return new_id, True

        forked_id, created = self.storage.write(work)
        return self.get_session(forked_id), created

    # -- turns ------------------------------------------------------------------------------

    def hold_turn(self, session_id: str) -> AbstractContextManager[bool]:
        """While the block runs, the session's turn is marked as running here: yields True if
        this caller got it, False if a turn of it is running elsewhere (in this process, or on
        PostgreSQL in another instance). The runtime holds it for every turn it runs, so resume
        never takes a running turn for a cut one."""
        check_id(session_id, "session_id")
        return self.storage.hold_turn(self.tenant, session_id)

    # -- live -------------------------------------------------------------------------------

    def subscribe(
        self, session_id: str, *, after: int = 0, poll_interval: float = 0.2
    ) -> Iterator[Event]:
        """Every event with seq > after, then each new one as it commits (in order, no gap, no
        duplicate). Ends after the event that deletes the session (at once, once caught up, if
        it is deleted already). Other processes' commits are found by polling every
        `poll_interval` seconds."""
        check_int(after, "after", 0)
        deleted = self.get_session(session_id).status == "deleted"
        stream = live.follow_session(after, deleted=deleted)
        signal = self.storage.signal
        while not stream.ended:
            seen = signal.version  # before the read: a commit after it ends the wait below
            yield from stream.take(
                self.storage.events(
                    self.tenant, session_id, after=stream.cursor, limit=live.PAGE_SIZE
                )
            )
            if stream.waits:
                signal.wait(seen, poll_interval)

    def subscribe_all(
        self, *, after: str | None = None, poll_interval: float = 0.2
    ) -> Iterator[Event]:
        """The tenant's global feed after `after` (a position), then live, in position order:
        every committed event once, as `events_all` promises."""
        stream = live.follow_feed(after)
        signal = self.storage.signal
        while not stream.ended:
            seen = signal.version  # before the read: a commit after it ends the wait below
            yield from stream.take(self.events_all(after=stream.cursor, limit=live.PAGE_SIZE))
            if stream.waits:
                signal.wait(seen, poll_interval)

    # -- the database -----------------------------------------------------------------------

    def import_lines(
        self,
        open_lines: Callable[[], Iterable[str | bytes]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> ImportReport:
        """Store the events of a JSON Lines export (`agentjournal.transfer.export_lines`) in this
        tenant, all or nothing: a corrupt line anywhere rejects the file, naming its line.

        `open_lines` is called for a fresh iteration each time the write runs (PostgreSQL reruns
        a transaction a lost connection rolled back). A line may start a session (seq 1, its
        `session_created`; the id must be free) or continue one, from this file or already
        stored, at exactly its next seq. Blank lines are skipped. `progress` gets the number of
        lines read so far."""
        work = transfer.import_work(self.tenant, self.max_payload_bytes, open_lines, progress)
        return self.storage.write(work)

    @property
    def database(self) -> int:
        """The same number for every journal over one open database (this one and its
        `for_tenant` views) while it is open: a key for state kept per database beside them."""
        return id(self.storage)

    @property
    def keys(self) -> ApiKeys:
        """The HTTP service's API keys, stored beside the journal: create, check, list and
        revoke them. They belong to the database, not to this journal's tenant: each key names
        the tenant it acts for."""
        return ApiKeys(self.storage)

    def tenants(self) -> list[str]:
        """Every tenant with a session in the database, in name order (whichever tenant this
        journal is scoped to)."""
        return self.storage.tenants()

    # -- verify -----------------------------------------------------------------------------

    def verify(
        self, *, rebuild: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> VerifyReport:
        """Rebuild every projection of this tenant from the journal with the pure fold, compare
        with what is stored, and report each difference; `rebuild=True` also repairs them.
        `progress(done, total)` is called before each session and at the end with how many of
        the tenant's sessions have been checked and how many there are."""
        report = VerifyReport(integrity=self.storage.integrity_errors())
        searchable = True
        search_differences = False
        session_ids = self.storage.session_ids(self.tenant)
        for done, session_id in enumerate(session_ids):
            if progress is not None:
                progress(done, len(session_ids))
            events = self.storage.events(self.tenant, session_id)
            stored = self.storage.session(self.tenant, session_id)
            if stored is None:  # purged while we looked
                continue
            report.sessions_checked += 1
            report.events_checked += len(events)
            report.journal_errors += verify.journal_errors(session_id, events)
            expected = projection.fold(session_id, self.tenant, events)
            found = verify.compare_session(
                expected,
                stored,
                self.storage.messages(self.tenant, session_id, None),
                self.storage.tool_calls(self.tenant, session_id),
                self.storage.tasks(self.tenant, session_id=session_id, limit=MAX_INT),
            )
            report.differences += found
            if found and rebuild:
                self._rewrite(expected)
                report.rebuilt.append(session_id)
            if searchable:
                try:
                    indexed = self.storage.search_index_ids(self.tenant, session_id)
                except SearchUnavailable:
                    searchable = False
                    continue
                missing = verify.compare_search_index(session_id, events, *indexed)
                report.differences += missing
                search_differences = search_differences or bool(missing)
        if progress is not None:
            progress(len(session_ids), len(session_ids))
        if search_differences and rebuild:
            self.storage.reindex()
            report.rebuilt.append("search_index")
        return report

    def reindex_search(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the full-text search index of the whole database (every tenant) from the
        journal: for a database whose `verify()` reports index differences. Returns the number
        of events read; `progress` gets that number so far after each batch. Searches
        meanwhile see a partial index."""
        return self.storage.reindex(progress)

    def _rewrite(self, expected: projection.Projection) -> None:
        self.storage.write(lambda tx: tx.replace_projection(self.tenant, expected))

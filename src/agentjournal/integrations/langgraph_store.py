"""Where `JournalSaver` finds a LangGraph thread in the journal: the thread's session, its
checkpoint events, the values its blob events hold, and what this process remembers of them.

Everything remembered here can be read again from the journal: a thread's checkpoints by
`checkpoint_id`, the newest checkpoint of each namespace, the blob values lately read or written
(a long list is rebuilt from the blobs it extends once, then kept). Other processes' appends are
found by reading what follows a remembered checkpoint. See `langgraph_events` for the events.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

import agentjournal.integrations.langgraph_events as lg
from agentjournal.errors import Conflict, SessionNotFound
from agentjournal.events import LANGGRAPH_BLOB, LANGGRAPH_CHECKPOINT, LANGGRAPH_PRUNED, Event
from agentjournal.journal import Journal

__all__ = ["EMPTY", "Head", "ThreadState", "ThreadStore", "session_id_for", "visible_checkpoints"]

EMPTY: Any = object()  # the value of a channel that was cleared
_PAGE = 500
_EARLY = 256  # checkpoints whose writes came first, remembered per thread until they are put
_CACHED_VALUES = 512  # deserialised blob values kept per saver, newest used first
_HEADS = 256  # checkpoints remembered per thread
_THREADS = 4096  # threads remembered per saver
_IMMUTABLE = (str, bytes, int, float, bool, type(None))
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")


def session_id_for(thread_id: str) -> str:
    """The journal session of a thread: the thread id itself when it is a valid session id (so
    the inspector opens it at `#/sessions/<thread_id>`), else `lg-` and a hash of it."""
    if 0 < len(thread_id) <= 128 and thread_id[0].isalnum() and set(thread_id) <= _ID_CHARS:
        return thread_id
    return "lg-" + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:40]


class Head:
    """A checkpoint as this process saw it: its event's seq and, per channel, the version it
    holds and the seq of the blob event with that value."""

    __slots__ = ("blobs", "seq")

    def __init__(self, seq: int, blobs: dict[str, tuple[Any, int]]) -> None:
        self.seq, self.blobs = seq, blobs


class ThreadState:
    """What this process knows of one thread's session (all of it can be read again)."""

    __slots__ = ("early", "heads", "latest", "lock", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        # LangGraph puts a checkpoint on a worker thread while the tasks of its step run, so a
        # task's writes may reach the journal before their checkpoint does. The puts and writes
        # of one thread take turns under `lock`; writes for a checkpoint not yet put here are
        # `early`, and the checkpoint, put later, names them (`early_writes`).
        self.lock = threading.Lock()
        self.early: dict[tuple[str, str], list[int]] = {}
        self.heads: dict[tuple[str, str], Head] = {}  # (ns, checkpoint id) -> what it holds
        self.latest: dict[str, int] = {}  # ns -> seq of the newest checkpoint put here

    def remember(self, ns: str, checkpoint_id: str, head: Head) -> None:
        """Keep what a checkpoint holds (the newest _HEADS; an older one is read again)."""
        self.heads.pop((ns, checkpoint_id), None)
        self.heads[(ns, checkpoint_id)] = head
        while len(self.heads) > _HEADS:
            del self.heads[next(iter(self.heads))]


class ThreadStore:
    """The journal side of a saver: one per saver, shared by its threads of execution."""

    def __init__(self, journal: Journal, serde: SerializerProtocol) -> None:
        self.journal = journal
        self.serde = serde
        self.lock = threading.Lock()
        self._sessions: dict[str, str] = {}  # thread id -> its data session
        self._births: dict[str, int] = {}  # data session -> the event id of its first event
        self._threads_seen: dict[str, ThreadState] = {}
        self._values: OrderedDict[tuple[str, int], tuple[Any, int]] = OrderedDict()

    def with_serde(self, serde: SerializerProtocol) -> ThreadStore:
        """The same store (caches and locks shared) reading values with another serde."""
        other = copy.copy(self)
        other.serde = serde
        return other

    def session(self, thread_id: str) -> str | None:
        """The data session of a thread (a copied thread's is a fork), None if none exists.

        Remembered once found, with the event id of its first event. Each call checks that id
        again (one read of one event): another process may have deleted the thread and run it
        anew under the same session id, whose seqs then name other events, and all this store
        remembers of the old one must go."""
        with self.lock:
            known = self._sessions.get(thread_id)
        if known is not None:
            born = self._birth(known)
            with self.lock:
                same = born is not None and born == self._births.get(known)
            if same:
                return known
            self.forget(known)
        home = session_id_for(thread_id)
        try:
            session = self.journal.get_session(home)
        except SessionNotFound:
            return None
        if session.metadata.get("integration") != "langgraph":
            raise Conflict(f"session {home!r} is not a LangGraph thread's; use another thread_id")
        target = session.metadata.get("langgraph_session")
        found = target if isinstance(target, str) else home
        born = self._birth(found)
        if born is None:
            return None  # a copy whose fork was deleted meanwhile
        with self.lock:
            self._sessions[thread_id] = found
            self._births[found] = born
        return found

    def _birth(self, session_id: str) -> int | None:
        """The event id of the session's first event: a session id used again gets a new one
        (event ids are never reused). None if the session does not exist."""
        try:
            first = self.journal.events(session_id, limit=1)
        except SessionNotFound:
            return None
        return first[0].event_id if first else None

    def ensure(self, thread_id: str) -> str:
        found = self.session(thread_id)
        if found is not None:
            return found
        home = session_id_for(thread_id)
        try:
            self.journal.create_session(
                thread_id[:200],
                metadata={"integration": "langgraph", "thread_id": thread_id},
                session_id=home,
                idempotency_key=f"langgraph:{home}",
            )
        except Conflict:
            # Created meanwhile by another thread or process (on PostgreSQL two concurrent
            # creations can both miss the other's idempotency key): use it if it is ours.
            found = self.session(thread_id)
            if found is None:
                raise
            return found
        return home

    def thread(self, session_id: str) -> ThreadState:
        with self.lock:
            found = self._threads_seen.pop(session_id, None)
            if found is None:
                found = ThreadState(session_id)
            self._threads_seen[session_id] = found  # the most recently used last
            if len(self._threads_seen) > _THREADS:
                # Forget the least recently used thread that no put or write holds now.
                for idle, state in self._threads_seen.items():
                    if not state.lock.locked():
                        del self._threads_seen[idle]
                        break
            return found

    def forget(self, session_id: str) -> None:
        """Drop all that is remembered of a session (it was purged, here or elsewhere)."""
        with self.lock:
            for thread_id in [t for t, s in self._sessions.items() if s == session_id]:
                del self._sessions[thread_id]
            self._births.pop(session_id, None)
            self._threads_seen.pop(session_id, None)
            for key in [k for k in self._values if k[0] == session_id]:
                del self._values[key]

    # -- reading --------------------------------------------------------------------------

    def event(self, session_id: str, seq: int) -> Event | None:
        found = self.journal.events(session_id, after=seq - 1, limit=1)
        return found[0] if found and found[0].seq == seq else None

    def value(self, session_id: str, seq: int) -> tuple[Any, int]:
        """The value the blob event at `seq` holds (`EMPTY` for a cleared channel), following
        `base` back for a list stored as an extension, and how many extensions lead to it."""
        chain: list[tuple[int, Any]] = []  # (seq, items added), newest first
        base: tuple[Any, int] | None = None
        at = seq
        while True:
            with self.lock:
                found = self._values.get((session_id, at))
                if found is not None:
                    self._values.move_to_end((session_id, at))
            if found is not None:
                base = found
                break
            event = self.event(session_id, at)
            if event is None or event.type != LANGGRAPH_BLOB:
                raise Conflict(f"session {session_id}: seq {at} is not a LangGraph blob")
            payload = event.payload
            if payload["value"]["type"] == "empty":
                base = (EMPTY, 0)
                break
            value = self.serde.loads_typed(lg.decode(payload["value"]))
            if "base" not in payload:
                base = (value, 0)
                break
            chain.append((int(payload["depth"]), value))
            at = payload["base"]
        if not chain:
            self.keep(session_id, seq, *base)
            return base
        items = list(base[0])
        for _, added in reversed(chain):
            items += added
        self.keep(session_id, seq, items, chain[0][0])
        return items, chain[0][0]

    def note_early(self, thread: ThreadState, ns: str, checkpoint_id: str, seq: int) -> None:
        """Writes at `seq` for a checkpoint not put yet: its put will name them."""
        with self.lock:
            thread.early.setdefault((ns, checkpoint_id), []).append(seq)
            if len(thread.early) > _EARLY:  # checkpoints never put: forget the oldest
                del thread.early[next(iter(thread.early))]

    def keep(self, session_id: str, seq: int, value: Any, depth: int) -> None:
        """Remember a blob's value. Lists are kept (a list is handed out as a copy, and a long
        one is what reading again would cost most); of other values only the immutable ones,
        so that no caller can change a value this store hands out later."""
        if not isinstance(value, (list, *_IMMUTABLE)) and value is not EMPTY:
            return
        with self.lock:
            self._values[(session_id, seq)] = (value, depth)
            while len(self._values) > _CACHED_VALUES:
                self._values.popitem(last=False)

    def scan_back(self, session_id: str, until: Callable[[Event], bool]) -> list[Event]:
        """The session's events from the newest back to the first that `until` accepts (oldest
        first, that one included); all of them if none does."""
        found: list[Event] = []
        before = 2**63 - 1
        while True:
            page = self.journal.events(session_id, before=before, limit=_PAGE)
            for index in range(len(page) - 1, -1, -1):
                if until(page[index]):
                    return page[index:] + found
            found = page + found
            if len(page) < _PAGE:
                return found
            before = page[0].seq

    def after(self, session_id: str, seq: int) -> Iterator[Event]:
        after = seq
        while True:
            page = self.journal.events(session_id, after=after, limit=_PAGE)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].seq

    def locate(self, session_id: str, ns: str, checkpoint_id: str | None) -> list[Event]:
        """The checkpoint's event and every event after it; [] if there is no such checkpoint."""
        thread = self.thread(session_id)
        head = thread.heads.get((ns, checkpoint_id)) if checkpoint_id is not None else None
        known = thread.latest.get(ns) if checkpoint_id is None else getattr(head, "seq", None)
        if known is not None:
            events = list(self.after(session_id, known - 1))
            # Another process may have put a newer checkpoint, or pruned this one.
            moved = any(
                (checkpoint_id is None and lg.is_checkpoint(e, ns)) or e.type == LANGGRAPH_PRUNED
                for e in events[1:]
            )
            if events and lg.is_checkpoint(events[0], ns) and not moved:
                return events
        # Read back from the newest event; the prunes met on the way are the ones after the
        # checkpoint being looked at. The latest is the newest checkpoint that none of them hid
        # (a prune that raced a put, before prune appended at the seq it read, could hide the
        # newest one); a named checkpoint that one of them hid is not there.
        later_keeps: list[dict[str, str]] = []

        def hidden(event: Event) -> bool:
            return any(keep.get(ns) != event.payload["checkpoint_id"] for keep in later_keeps)

        def until(event: Event) -> bool:
            if event.type == LANGGRAPH_PRUNED:
                later_keeps.append(event.payload["keep"])
                return False
            if not lg.is_checkpoint(event, ns):
                return False
            if checkpoint_id is None:
                return not hidden(event)
            return bool(event.payload["checkpoint_id"] == checkpoint_id)

        events = self.scan_back(session_id, until)
        if not events or not lg.is_checkpoint(events[0], ns) or hidden(events[0]):
            return []
        return events

    def head(self, session_id: str, event: Event) -> Head:
        """What the checkpoint `event` holds, remembered for the puts that follow it."""
        payload = event.payload
        checkpoint = self.serde.loads_typed(lg.decode(payload["checkpoint"]))
        versions = checkpoint.get("channel_versions", {})
        blobs: dict[str, tuple[Any, int]] = {}
        for channel in payload["blobs"]:
            seq = lg.blob_ref(event, channel)
            assert seq is not None
            blobs[channel] = (versions.get(channel), seq)
        head = Head(event.seq, blobs)
        thread = self.thread(session_id)
        with self.lock:
            thread.remember(payload["ns"], payload["checkpoint_id"], head)
        return head

    def threads(self) -> list[tuple[str, str]]:
        """Every LangGraph thread of the tenant, as (thread id, data session)."""
        found: list[tuple[str, str]] = []
        cursor = None
        while True:
            page = self.journal.sessions(limit=1000, cursor=cursor)
            for session in page:
                meta = session.metadata
                if meta.get("integration") != "langgraph" or not isinstance(
                    meta.get("thread_id"), str
                ):
                    continue
                target = meta.get("langgraph_session")
                if isinstance(target, str):
                    found.append((meta["thread_id"], target))
                elif session.forked_from is None:
                    found.append((meta["thread_id"], session.session_id))
            if len(page) < 1000:
                return found
            cursor = page[-1].last_position

    def parent(self, session_id: str, ns: str, parent_id: str | None) -> Head | None:
        if parent_id is None:
            return None
        known = self.thread(session_id).heads.get((ns, parent_id))
        if known is not None:
            return known
        events = self.locate(session_id, ns, parent_id)
        return self.head(session_id, events[0]) if events else None

    def blob_seq(
        self, session_id: str, ns: str, channel: str, version: Any, parent: Head | None
    ) -> int | None:
        """The seq of the blob holding (channel, version) in this thread, for a channel this
        checkpoint did not change: its parent's, else the newest such blob (None: no value)."""
        if parent is not None and channel in parent.blobs:
            held, seq = parent.blobs[channel]
            if held == version:
                return seq

        def holds(event: Event) -> bool:
            payload = event.payload
            return (
                event.type == LANGGRAPH_BLOB
                and payload["ns"] == ns
                and payload["channel"] == channel
                and payload["version"] == version
            )

        found = self.scan_back(session_id, holds)
        return found[0].seq if found and holds(found[0]) else None


def visible_checkpoints(events: Sequence[Event]) -> list[Event]:
    """The newest event of every checkpoint that no later `langgraph.pruned` removed."""
    heads: dict[tuple[str, str], Event] = {}
    for event in events:
        if event.type == LANGGRAPH_CHECKPOINT:
            heads[(event.payload["ns"], event.payload["checkpoint_id"])] = event
        elif event.type == LANGGRAPH_PRUNED:
            keep = event.payload["keep"]
            heads = {k: e for k, e in heads.items() if keep.get(k[0]) == k[1]}
    return list(heads.values())

"""agentjournal as LangGraph's checkpointer (`pip install 'agentjournal[langgraph]'`).

```python
from agentjournal.integrations.langgraph import JournalSaver

with JournalSaver.from_conn_string("agent.db") as saver:      # or AsyncJournalSaver
    graph = builder.compile(checkpointer=saver)
```

A thread is a journal session (its subgraphs' namespaces included). A checkpoint stores what
changed: one blob per (channel, version) in `new_versions`, and of a list that grew only what was
added. The messages a graph adds to its `messages` channel are also the journal's own message
and tool-call events, so `replay`, `messages`, the inspector and the CLI show the thread as a
conversation. `copy_thread` is a journal `fork`; `delete_thread` and `prune(strategy="delete")`
purge. `langgraph_events` has the events; docs/integrations.md the whole story.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import random
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, TypeVar

from langchain_core.messages import message_to_dict
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

try:  # LangGraph's DeltaChannel snapshot (beta, private), to refuse pruning threads using one
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
except ImportError:  # pragma: no cover - an older langgraph-checkpoint: no DeltaChannel
    _DeltaSnapshot = None  # type: ignore[assignment,misc]

import agentjournal.integrations.langgraph_events as lg
from agentjournal.aio import AsyncJournal
from agentjournal.errors import Conflict, InvalidArgument, PayloadTooLarge, SessionNotFound
from agentjournal.events import (
    LANGGRAPH_BLOB,
    LANGGRAPH_CHECKPOINT,
    LANGGRAPH_PRUNED,
    LANGGRAPH_WRITES,
    Event,
    NewEvent,
)
from agentjournal.integrations.langgraph_store import (
    EMPTY,
    Head,
    ThreadStore,
    session_id_for,
    visible_checkpoints,
)
from agentjournal.journal import Durability, Journal

__all__ = ["AsyncJournalSaver", "JournalSaver", "session_id_for"]

T = TypeVar("T")

_EXT_DELTA_SNAPSHOT = 7  # the msgpack ext type of LangGraph's DeltaChannel snapshot blobs
_PRUNE_ATTEMPTS = 8  # reads of a thread that prune makes while a graph appends to it
_CHAIN_ATTEMPTS = 8  # appends of a chained blob's batch while other appends get in first


class _Saver(BaseCheckpointSaver[str]):
    """The checkpointer's work, over a sync `Journal`; the two public classes add async."""

    journal: Journal

    def __init__(self, journal: Journal, *, serde: SerializerProtocol | None = None) -> None:
        if not isinstance(journal, Journal):
            raise InvalidArgument(
                "JournalSaver takes a Journal (AsyncJournalSaver an AsyncJournal)"
            )
        super().__init__(serde=serde)
        self.journal = journal
        self.store = ThreadStore(journal, self.serde)
        self._owned = False

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> _Saver:
        """LangGraph compiles a graph with a copy of its saver whose serde allows the graph's
        types; the copy's store reads with that serde."""
        clone = super().with_allowlist(extra_allowlist)
        assert isinstance(clone, _Saver)
        if clone is not self:
            clone.store = self.store.with_serde(clone.serde)
        return clone

    # -- reading --------------------------------------------------------------------------

    def _tuple(
        self, thread_id: str, session_id: str, head: Event, writes: Sequence[Event]
    ) -> CheckpointTuple:
        """The tuple of the checkpoint event `head`, its pending writes among `writes`."""
        payload = head.payload
        ns, checkpoint_id = payload["ns"], payload["checkpoint_id"]
        checkpoint: Checkpoint = self.serde.loads_typed(lg.decode(payload["checkpoint"]))
        values: dict[str, Any] = {}
        for channel, (_, seq) in self.store.head(session_id, head).blobs.items():
            value = self.store.value(session_id, seq)[0]
            if value is not EMPTY:
                values[channel] = list(value) if isinstance(value, list) else value
        pending = lg.pending_writes(e for e in writes if lg.is_writes(e, ns, checkpoint_id))
        config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        parent = payload.get("parent_id")
        return CheckpointTuple(
            config=config,
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(lg.decode(payload["metadata"])),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[(task, ch, self.serde.loads_typed(v)) for task, ch, v in pending],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_of(config)
        session_id = self.store.session(thread_id)
        if session_id is None:
            return None
        try:
            events = self.store.locate(session_id, ns, get_checkpoint_id(config))
        except SessionNotFound:
            self.store.forget(session_id)
            return None
        if not events:
            return None
        early = [
            self.store.event(session_id, seq) for seq in events[0].payload.get("early_writes", ())
        ]
        writes = [e for e in early if e is not None] + events[1:]
        return self._tuple(thread_id, session_id, events[0], writes)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            threads = self.store.threads()
            ns_only = checkpoint_only = None
        else:
            thread_id, _ = _thread_of(config)
            session_id = self.store.session(thread_id)
            threads = [] if session_id is None else [(thread_id, session_id)]
            ns_only = config["configurable"].get("checkpoint_ns")
            checkpoint_only = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id, session_id in threads:
            try:
                events = list(self.store.after(session_id, 0))
            except SessionNotFound:
                continue
            heads = visible_checkpoints(events)
            writes: dict[tuple[str, str], builtins.list[Event]] = {}
            for event in events:
                if event.type == LANGGRAPH_WRITES:
                    key = (event.payload["ns"], event.payload["checkpoint_id"])
                    writes.setdefault(key, []).append(event)
            for head in sorted(heads, key=lambda e: e.payload["checkpoint_id"], reverse=True):
                ns, checkpoint_id = head.payload["ns"], head.payload["checkpoint_id"]
                if ns_only is not None and ns != ns_only:
                    continue
                if checkpoint_only and checkpoint_id != checkpoint_only:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                if filter:
                    metadata = self.serde.loads_typed(lg.decode(head.payload["metadata"]))
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield self._tuple(thread_id, session_id, head, writes.get((ns, checkpoint_id), []))

    # -- writing --------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return self._put(config, checkpoint, metadata, new_versions)
        except SessionNotFound as exc:  # the thread was deleted meanwhile: start it again
            self.store.forget(exc.session_id)
            return self._put(config, checkpoint, metadata, new_versions)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns = _thread_of(config)
        _check_checkpoint(checkpoint, metadata, new_versions)
        parent_id = get_checkpoint_id(config)
        stored = self.serde.dumps_typed(
            {k: v for k, v in checkpoint.items() if k != "channel_values"}
        )
        typed_metadata = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        session_id = self.store.session(thread_id)
        if session_id is None:
            # The thread's first put: what the journal would refuse (a value over its payload
            # limit, say) is refused before the thread's session is created.
            trial = self._batch(
                None, ns, checkpoint, new_versions, parent_id, stored, typed_metadata
            )
            self.journal.prepare_batch(
                _resolved([*trial[0], NewEvent(LANGGRAPH_CHECKPOINT, trial[3])], 0)
            )
            session_id = self.store.ensure(thread_id)
        batch, fresh, blobs, payload = self._batch(
            session_id, ns, checkpoint, new_versions, parent_id, stored, typed_metadata
        )
        thread = self.store.thread(session_id)
        with thread.lock:
            early = thread.early.get((ns, checkpoint["id"]))
            if early:
                payload["early_writes"] = list(early)
            appended = self._append(session_id, [*batch, NewEvent(LANGGRAPH_CHECKPOINT, payload)])
            for channel, (index, value, depth) in fresh.items():
                blobs[channel] = (new_versions[channel], appended[index].seq)
                self.store.keep(session_id, appended[index].seq, value, depth)
            with self.store.lock:
                thread.early.pop((ns, checkpoint["id"]), None)
                thread.remember(ns, checkpoint["id"], Head(appended[-1].seq, blobs))
                thread.latest[ns] = appended[-1].seq
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _append(self, session_id: str, batch: builtins.list[NewEvent]) -> builtins.list[Event]:
        """Append a put's batch. A blob chained to a blob of the same batch (a list too large
        for one event) names its base by a negative placeholder, `-1 - index in the batch`; the
        seqs are known only against the session's last seq, so such a batch is appended with
        `expected_seq`, read again if another append got in first."""
        if not any(_local_base(e) is not None for e in batch):
            return self.journal.append_many(session_id, batch)
        for attempt in range(_CHAIN_ATTEMPTS):
            last = self.journal.get_session(session_id).last_seq
            try:
                return self.journal.append_many(
                    session_id, _resolved(batch, last), expected_seq=last
                )
            except Conflict:
                if (
                    attempt + 1 == _CHAIN_ATTEMPTS
                    or self.journal.get_session(session_id).last_seq == last
                ):
                    raise  # not a race with another append: the batch itself is refused
        raise AssertionError("unreachable")  # pragma: no cover

    def _batch(
        self,
        session_id: str | None,
        ns: str,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent_id: str | None,
        stored: tuple[str, bytes],
        metadata: tuple[str, bytes],
    ) -> tuple[
        builtins.list[NewEvent],
        dict[str, tuple[int, Any, int]],
        dict[str, tuple[Any, int]],
        dict[str, Any],
    ]:
        """A put's events but the checkpoint's (blobs, then messages), the channels with a new
        blob (batch index, value, depth), the unchanged channels' blobs (version, seq), and the
        checkpoint's payload. `session_id` None: the thread has no session yet."""
        parent = None if session_id is None else self.store.parent(session_id, ns, parent_id)
        values = checkpoint["channel_values"]
        batch: builtins.list[NewEvent] = []
        fresh: dict[str, tuple[int, Any, int]] = {}  # channel -> batch index, value, depth
        added: builtins.list[Any] = []
        for channel, version in new_versions.items():
            value = values.get(channel, EMPTY)
            base = None if session_id is None else self._base(session_id, parent, channel, value)
            links, depth = self._blob(ns, channel, version, value, base, len(batch))
            kept = list(value) if isinstance(value, list) else value
            batch += [NewEvent(LANGGRAPH_BLOB, link) for link in links]
            fresh[channel] = (len(batch) - 1, kept, depth)
            if ns == "" and channel == "messages" and isinstance(value, list):
                old = base[1] if base is not None else None
                new = lg.new_messages(old if isinstance(old, list) else None, value)
                added = new if lg.is_message_list(new) else []
        blobs: dict[str, tuple[Any, int]] = {}
        if session_id is not None:
            for channel, version in checkpoint["channel_versions"].items():
                if channel not in fresh:
                    seq = self.store.blob_seq(session_id, ns, channel, version, parent)
                    if seq is not None:
                        blobs[channel] = (version, seq)
        batch += self._message_events(session_id, added)
        refs = {channel: seq for channel, (_, seq) in blobs.items()}
        for channel, (index, _, _) in fresh.items():
            refs[channel] = index - len(batch)  # counted back from the checkpoint event
        payload = lg.checkpoint_payload(ns, checkpoint["id"], parent_id, stored, metadata, refs)
        return batch, fresh, blobs, payload

    def _base(
        self, session_id: str, parent: Head | None, channel: str, value: Any
    ) -> tuple[int, Any, int] | None:
        """The parent's value of `channel` (its blob's seq, the value, its depth), if the new
        value is a list and the parent has a value to compare it with."""
        if parent is None or not isinstance(value, list) or channel not in parent.blobs:
            return None
        seq = parent.blobs[channel][1]
        old, depth = self.store.value(session_id, seq)
        return seq, old, depth

    def _blob(
        self,
        ns: str,
        channel: str,
        version: Any,
        value: Any,
        base: tuple[int, Any, int] | None,
        at: int,
    ) -> tuple[builtins.list[dict[str, Any]], int]:
        """The blob payloads of a channel's new value (to go at index `at` of the batch on), and
        the last one's depth: a list that extends its parent's value is stored as the items
        added; a list too large for one event as a chain of blobs, each extending the one
        before it."""
        if value is EMPTY:
            return [lg.blob_payload(ns, channel, version, ("empty", b""))], 0
        whole: tuple[str, bytes] | None = None
        if base is not None:
            seq, old, depth = base
            if isinstance(old, list) and len(value) >= len(old) and value[: len(old)] == old:
                if depth and depth % lg.MAX_DEPTH == 0:
                    # Store the whole list again (so reading it follows no more than MAX_DEPTH
                    # blobs), unless it has grown too large for one event: then extend on.
                    whole = self.serde.dumps_typed(value)
                    if len(whole[1]) <= self.journal.max_payload_bytes // 4:
                        return [lg.blob_payload(ns, channel, version, whole)], 0
                added = self.serde.dumps_typed(value[len(old) :])
                payload = lg.blob_payload(ns, channel, version, added, base=seq, depth=depth + 1)
                return [payload], depth + 1
        whole = whole or self.serde.dumps_typed(value)
        payload = lg.blob_payload(ns, channel, version, whole)
        if isinstance(value, list) and len(value) > 1 and not self._fits(payload):
            return self._chain(ns, channel, version, value, at)
        return [payload], 0

    def _fits(self, payload: dict[str, Any]) -> bool:
        """Whether the journal takes `payload` as one event."""
        if len(payload["value"]["data"]) <= self.journal.max_payload_bytes // 4:
            return True
        try:
            self.journal.prepare_batch([NewEvent(LANGGRAPH_BLOB, payload)])
        except PayloadTooLarge:
            return False
        return True

    def _chain(
        self, ns: str, channel: str, version: Any, value: builtins.list[Any], at: int
    ) -> tuple[builtins.list[dict[str, Any]], int]:
        """A list too large for one event as blobs of about a quarter of the payload limit
        each: the first holds the list's first items, each next one extends the one before it
        (`base` a placeholder for its seq, see `_append`). The last link's depth counts the
        links after the first, as if the list had grown by them: the steps that extend it go
        on from there, and the whole list is tried again at the next multiple of MAX_DEPTH."""
        budget = max(1, self.journal.max_payload_bytes // 4)
        chunks: builtins.list[builtins.list[Any]] = [[]]
        size = 0
        for item in value:
            item_size = len(self.serde.dumps_typed(item)[1])
            if chunks[-1] and size + item_size > budget:
                chunks.append([])
                size = 0
            chunks[-1].append(item)
            size += item_size
        links = [lg.blob_payload(ns, channel, version, self.serde.dumps_typed(chunks[0]))]
        for depth, chunk in enumerate(chunks[1:], start=1):
            typed = self.serde.dumps_typed(chunk)
            local = -1 - (at + depth - 1)  # the link before this one, see `_append`
            links.append(lg.blob_payload(ns, channel, version, typed, base=local, depth=depth))
        return links, len(links) - 1

    def _message_events(
        self, session_id: str | None, messages: builtins.list[Any]
    ) -> builtins.list[NewEvent]:
        if not messages:
            return []
        named = lg.call_ids(messages)
        calls = (
            self.journal.tool_calls(session_id, call_ids=named)
            if named and session_id is not None
            else []
        )
        return lg.message_events(
            messages,
            [_original(m) for m in messages],
            used_calls={c.call_id for c in calls},
            open_calls={c.call_id for c in calls if c.status == "pending"},
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns = _thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise InvalidArgument("put_writes needs a config with a checkpoint_id")
        _check_writes(writes, task_id, task_path)
        if not writes:
            return
        typed = [
            (WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        payload = lg.writes_payload(ns, checkpoint_id, task_id, task_path, typed)
        session_id = self.store.session(thread_id)
        if session_id is None:
            # The thread's first write: what the journal would refuse is refused before the
            # thread's session is created.
            self.journal.prepare_batch([NewEvent(LANGGRAPH_WRITES, payload)])
            session_id = self.store.ensure(thread_id)
        try:
            self._append_writes(session_id, ns, checkpoint_id, payload)
        except SessionNotFound:  # the thread was deleted meanwhile: start it again
            self.store.forget(session_id)
            self._append_writes(self.store.ensure(thread_id), ns, checkpoint_id, payload)

    def _append_writes(
        self, session_id: str, ns: str, checkpoint_id: str, payload: dict[str, Any]
    ) -> None:
        thread = self.store.thread(session_id)
        if (ns, checkpoint_id) in thread.heads:  # put already: the writes follow it
            self.journal.append(session_id, LANGGRAPH_WRITES, payload)
            return
        with thread.lock:  # its put may be under way: one of the two goes first
            event = self.journal.append(session_id, LANGGRAPH_WRITES, payload)
            if (ns, checkpoint_id) not in thread.heads:
                self.store.note_early(thread, ns, checkpoint_id, event.seq)

    # -- threads --------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Purge the thread's session (and, for a copied thread, its fork): every checkpoint,
        write and message of it is gone; the journal keeps an audit row without content."""
        home = session_id_for(str(thread_id))
        data = self.store.session(str(thread_id))
        for session_id in dict.fromkeys([data, home]):
            if session_id is None:
                continue
            self.store.forget(session_id)
            with suppress(SessionNotFound):
                self.journal.purge_session(session_id, actor="langgraph")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """A journal `fork` of the source's session, which the target thread then names."""
        source = self.store.session(str(source_thread_id))
        if source is None:
            return
        home = session_id_for(str(target_thread_id))
        if self.store.session(str(target_thread_id)) is not None:
            raise Conflict(f"thread {target_thread_id!r} exists already; delete it first")
        fork = self.journal.fork(
            source, title=str(target_thread_id)[:200], idempotency_key=f"langgraph-copy:{home}"
        )
        self.journal.create_session(
            str(target_thread_id)[:200],
            metadata={
                "integration": "langgraph",
                "thread_id": str(target_thread_id),
                "langgraph_session": fork.session_id,
            },
            session_id=home,
            idempotency_key=f"langgraph:{home}",
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`"delete"`: purge the threads (as `delete_thread`). `"keep_latest"`: every
        checkpoint but the newest of each namespace leaves LangGraph's view (`list`,
        `get_tuple`); the journal keeps them, so they stay in the inspector and `replay`."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgument(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        # A str is iterable: prune("thread-1") would prune (or purge) "t", "h", "r", ...
        if isinstance(thread_ids, str | bytes | bytearray) or not isinstance(thread_ids, Iterable):
            raise InvalidArgument(
                "thread_ids must be a list of thread ids (prune([thread_id]), not "
                f"prune(thread_id)), not {type(thread_ids).__name__}"
            )
        ids = [str(t) for t in thread_ids]
        if strategy == "keep_latest":
            # As PostgresSaver: a DeltaChannel's value is rebuilt from the writes of the
            # checkpoints before the latest, which keep_latest would hide. If any thread uses
            # one, nothing is pruned (and one that starts to meanwhile is refused on its turn).
            delta = [
                thread_id
                for thread_id in ids
                if (session_id := self.store.session(thread_id)) is not None
                and self._uses_delta_channel(list(self.store.after(session_id, 0)))
            ]
            if delta:
                raise NotImplementedError(
                    f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(delta)}"
                )
        for thread_id in ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            session_id = self.store.session(thread_id)
            if session_id is None:
                continue
            keep = self._keep_latest(session_id, thread_id)
            thread = self.store.thread(session_id)
            with self.store.lock:
                thread.heads = {k: v for k, v in thread.heads.items() if keep.get(k[0]) == k[1]}

    def _keep_latest(self, session_id: str, thread_id: str) -> dict[str, str]:
        """Hide all but the newest checkpoint of each namespace; the ones kept, per namespace.
        The prune is appended at the seq the thread was read at: a checkpoint put meanwhile (a
        graph running beside the prune) makes it read the thread again, so the newest is never
        hidden."""
        for attempt in range(_PRUNE_ATTEMPTS):
            last_seq = self.journal.get_session(session_id).last_seq
            events = list(self.store.after(session_id, 0))
            if self._uses_delta_channel(events):
                raise NotImplementedError(
                    f"keep_latest can't prune threads that use a DeltaChannel: {thread_id}"
                )
            heads = visible_checkpoints(events)
            keep: dict[str, str] = {}
            for head in heads:
                ns, checkpoint_id = head.payload["ns"], head.payload["checkpoint_id"]
                keep[ns] = max(keep.get(ns, checkpoint_id), checkpoint_id)
            if len(keep) == len(heads):
                return keep
            try:
                self.journal.append(
                    session_id, LANGGRAPH_PRUNED, {"keep": keep}, expected_seq=last_seq
                )
                return keep
            except Conflict:
                if self.journal.get_session(session_id).last_seq == last_seq:
                    raise  # not another writer's append: a conflict of another kind
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        raise Conflict(f"session {session_id}: the graph kept appending while prune read it")

    def _uses_delta_channel(self, events: Sequence[Event]) -> bool:
        """Whether a thread uses a DeltaChannel, found as PostgresSaver finds it: update
        counters in a checkpoint's metadata (`delta_writes_versioned` for LangGraph.js), or a
        snapshot blob."""
        for event in events:
            payload = event.payload
            if event.type == LANGGRAPH_CHECKPOINT:
                metadata = self.serde.loads_typed(lg.decode(payload["metadata"]))
                if isinstance(metadata, Mapping) and (
                    "counters_since_delta_snapshot" in metadata
                    or "delta_writes_versioned" in metadata
                ):
                    return True
            elif (
                event.type == LANGGRAPH_BLOB
                and "base" not in payload
                and self._is_delta_snapshot(lg.decode(payload["value"]))
            ):
                return True
        return False

    def _is_delta_snapshot(self, typed: tuple[str, bytes]) -> bool:
        kind, data = typed
        if kind == "msgpack":  # an ext of type 7 (EXT_DELTA_SNAPSHOT) at the top: read its head
            head = {0xD4: 1, 0xD5: 1, 0xD6: 1, 0xD7: 1, 0xD8: 1, 0xC7: 2, 0xC8: 3, 0xC9: 5}
            at = head.get(data[0]) if data else None
            return at is not None and len(data) > at and data[at] == _EXT_DELTA_SNAPSHOT
        if kind.startswith("msgpack+"):  # encrypted (EncryptedSerializer): decrypt to see
            return _DeltaSnapshot is not None and isinstance(
                self.serde.loads_typed(typed), _DeltaSnapshot
            )
        return False

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As LangGraph's own savers: an increasing counter and a random tail, so that two
        branches of a thread never give one channel the same version."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async: the same work on a worker thread ---------------------------------------------

    async def _offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        raise NotImplementedError

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._offload(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self._offload(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._offload(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._offload(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._offload(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._offload(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._offload(self.prune, thread_ids, strategy=strategy)

    def close(self) -> None:
        """Close the journal if `from_conn_string` opened it (one handed in stays open)."""
        if self._owned:
            self.journal.close()


def _thread_of(config: RunnableConfig) -> tuple[str, str]:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise InvalidArgument("a LangGraph config needs configurable.thread_id")
    ns = configurable.get("checkpoint_ns") or ""
    return str(thread_id), str(ns)


def _check_checkpoint(checkpoint: Any, metadata: Any, new_versions: Any) -> None:
    """Refuse a checkpoint that is not LangGraph's `Checkpoint` shape (before anything is
    written), naming what is wrong, instead of a KeyError halfway through a put."""
    if not isinstance(checkpoint, Mapping):
        raise InvalidArgument(f"checkpoint must be a dict, not {type(checkpoint).__name__}")
    checkpoint_id = checkpoint.get("id")
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise InvalidArgument(f"checkpoint['id'] must be a non-empty str, not {checkpoint_id!r}")
    for key in ("channel_values", "channel_versions"):
        if not isinstance(checkpoint.get(key), Mapping):
            found = type(checkpoint[key]).__name__ if key in checkpoint else "missing"
            raise InvalidArgument(f"checkpoint[{key!r}] must be a dict, not {found}")
    if not isinstance(metadata, Mapping):
        raise InvalidArgument(f"metadata must be a dict, not {type(metadata).__name__}")
    if not isinstance(new_versions, Mapping):
        raise InvalidArgument(f"new_versions must be a dict, not {type(new_versions).__name__}")


def _check_writes(writes: Any, task_id: Any, task_path: Any) -> None:
    """Refuse writes that are not a list of (channel, value) pairs, or a task id or path that
    is not a str, before anything is written."""
    if isinstance(writes, str | bytes | bytearray | Mapping) or not isinstance(writes, Sequence):
        raise InvalidArgument(
            f"writes must be a list of (channel, value) pairs, not {type(writes).__name__}"
        )
    for index, write in enumerate(writes):
        if (
            isinstance(write, str | bytes | bytearray)
            or not isinstance(write, Sequence)
            or len(write) != 2
            or not isinstance(write[0], str)
        ):
            raise InvalidArgument(f"writes[{index}] must be a (channel, value) pair: {write!r:.80}")
    if not isinstance(task_id, str):
        raise InvalidArgument(f"task_id must be a str, not {type(task_id).__name__}")
    if not isinstance(task_path, str):
        raise InvalidArgument(f"task_path must be a str, not {type(task_path).__name__}")


def _original(message: Any) -> dict[str, Any]:
    """A LangChain message as JSON (what `messages_from_dict` reads back)."""
    return dict(json.loads(json.dumps(message_to_dict(message), default=str)))


class JournalSaver(_Saver):
    """LangGraph's checkpointer over a `Journal` (its async methods run the sync ones on a
    worker thread)."""

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        serde: SerializerProtocol | None = None,
    ) -> Iterator[JournalSaver]:
        """A saver over a journal of its own at `conn_string` (a SQLite path or
        `postgresql://…`), closed on leaving the block. The journal migrates itself."""
        journal = Journal.open(conn_string, tenant=tenant, durability=durability)
        saver = cls(journal, serde=serde)
        saver._owned = True
        try:
            yield saver
        finally:
            saver.close()

    async def _offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)


class AsyncJournalSaver(_Saver):
    """LangGraph's checkpointer over an `AsyncJournal`: its async methods run on the journal's
    worker threads, so concurrent graphs share its group commit and never block the loop."""

    def __init__(self, journal: AsyncJournal, *, serde: SerializerProtocol | None = None) -> None:
        if not isinstance(journal, AsyncJournal):
            raise InvalidArgument("AsyncJournalSaver takes an AsyncJournal")
        super().__init__(journal.journal, serde=serde)
        self.async_journal = journal

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        serde: SerializerProtocol | None = None,
    ) -> AsyncIterator[AsyncJournalSaver]:
        """A saver over a journal of its own at `conn_string`, closed on leaving the block."""
        journal = await AsyncJournal.open(conn_string, tenant=tenant, durability=durability)
        try:
            yield cls(journal, serde=serde)
        finally:
            await journal.close()

    async def _offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.async_journal._run(fn, *args, **kwargs)


def _local_base(event: NewEvent) -> int | None:
    """The batch index of the blob that `event`, a link of a chain, extends (its `base` still
    the placeholder `-1 - index`); None for any other event."""
    if event.type != LANGGRAPH_BLOB:
        return None
    base = event.payload.get("base")
    return -1 - base if isinstance(base, int) and base < 0 else None


def _resolved(batch: Sequence[NewEvent], last: int) -> list[NewEvent]:
    """`batch` with its chained blobs' placeholder bases made seqs, the batch to be appended
    after the session's seq `last`."""
    resolved = []
    for event in batch:
        index = _local_base(event)
        if index is not None:
            event = NewEvent(event.type, {**event.payload, "base": last + 1 + index})
        resolved.append(event)
    return resolved

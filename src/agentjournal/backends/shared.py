"""One storage per database and process, shared by every `Journal.open` of that database.

A SQLite file takes one writer at a time. Two storages of one file in one process (one per
`JournalSession.open`, as a framework user writes it, one per conversation) each keep a writer
connection and a group-commit queue, and their appends take turns on the file's lock, one commit
each, where one queue would have served them together in one commit. So `open_storage` hands
out the one storage a file has in this process, counting its holders; the last `release` closes
it. A storage made directly (`SQLiteStorage(path)`, or `open_storage(..., shared=False)`) stays
its maker's alone. A PostgreSQL URL is shared the same way (one connection pool, one group
commit per URL and durability; `urls.POSTGRES_DATABASES`), its identity constant.

The key is the file's real path with the durability (a "normal" and a "full" opener each keep
theirs: their connections differ) and the process id: a child made by `fork()` opens its own. A
storage is handed out again only while the path still names the file it opened (`identity`): a
file replaced meanwhile (a restore, say) gets a storage of its own, and the old one stays its
holders' until they let go.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from agentjournal.backends import Storage

__all__ = ["SharedStorages"]


@dataclass
class _Entry:
    storage: Storage
    identity: Hashable
    holders: int = 0


class SharedStorages:
    """Storages by key, each open while it has a holder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[Hashable, _Entry] = {}

    def acquire(
        self, key: Hashable, make: Callable[[], Storage], identity: Callable[[], Hashable]
    ) -> tuple[Storage, Callable[[], None]]:
        """The storage of `key` (made now if it has none, or if `identity()`, what the key names
        now, differs from what it named when its storage was made) and the function that lets go
        of it; calling that twice lets go once."""
        key = (os.getpid(), key)
        with self._lock:
            # Made under the lock: two first openers of one file must not make two storages.
            # Opening is rare (a migration at most), so serialising it costs nothing that counts.
            entry = self._open.get(key)
            if entry is None or entry.identity != identity():
                storage = make()
                entry = self._open[key] = _Entry(storage, identity())
            entry.holders += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                entry.holders -= 1
                if entry.holders:
                    return
                if self._open.get(key) is entry:
                    del self._open[key]
            entry.storage.close()

        return entry.storage, release

    def holders(self, key: Hashable) -> int:
        """How many holders the storage of `key` has in this process (0: none open)."""
        with self._lock:
            entry = self._open.get((os.getpid(), key))
            return entry.holders if entry is not None else 0

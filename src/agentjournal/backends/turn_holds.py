"""Which sessions' turns this process is running, so no one else takes them for cut ones.

A turn holds no lease in the journal: its events say only that it has not ended. While a process
runs a turn it holds the session here; resume and a second turn skip a held session. Within a
process that is a set; across PostgreSQL instances the backend adds a session-level advisory lock
on a connection of its own, which the server drops when the process dies, so a crashed holder's
turns become resumable at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["TurnHolds"]


class TurnHolds:
    """In-process holds, with optional hooks that take and give back a cross-process one."""

    def __init__(
        self,
        acquire: Callable[[str, str], bool] | None = None,
        release: Callable[[str, str], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._held: set[tuple[str, str]] = set()
        self._acquire = acquire
        self._release = release

    @contextmanager
    def hold(self, tenant: str, session_id: str) -> Iterator[bool]:
        key = (tenant, session_id)
        with self._lock:
            if key in self._held:
                got = False
            else:
                got = self._acquire is None or self._acquire(tenant, session_id)
                if got:
                    self._held.add(key)
        try:
            yield got
        finally:
            if got:
                with self._lock:
                    self._held.discard(key)
                    if self._release is not None:
                        self._release(tenant, session_id)

"""A TCP proxy on loopback for fault tests: forwards to a real server until told to cut every
connection it carries (with a reset, as a dropped network path or a restarted server looks to
the client) or to refuse new ones for a while."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.refusing = False
        self.cuts = 0
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def cut(self) -> None:
        """Reset every connection now open, both ways."""
        with self.lock:
            sockets, self.open = self.open, []
            self.cuts += 1
        for sock in sockets:
            _reset(sock)

    def refuse(self, refusing: bool) -> None:
        """While refusing, a new connection is accepted and reset at once."""
        self.refusing = refusing

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self.lock:
                self.open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _reset(sock: socket.socket) -> None:
    # shutdown() first: close() alone neither wakes the pump blocked in recv() on this socket nor
    # ends the connection while that call holds it, so the peer would wait forever.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()

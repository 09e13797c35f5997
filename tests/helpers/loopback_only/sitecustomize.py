"""Loaded by every Python process the documentation's snippets start (tests/test_doc_snippets.py
puts this folder first on PYTHONPATH): the process may resolve no name but `localhost` and
connect to no address but a loopback one. A refused attempt raises and is reported on stderr,
where the test looks for REFUSED, so a library that swallows the error still fails the block."""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any

REFUSED = "snippet tests: refused to contact"
_LOCAL_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def _refuse(what: object) -> None:
    message = f"{REFUSED} {what!r} (only loopback addresses are allowed)"
    print(message, file=sys.stderr, flush=True)
    raise PermissionError(message)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


_getaddrinfo = socket.getaddrinfo


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if name is not None and not _is_ip(name) and name.lower() not in _LOCAL_NAMES:
        _refuse(name)  # resolving it would already ask a DNS server
    return _getaddrinfo(host, *args, **kwargs)


def _check(sock: socket.socket, address: Any) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a Unix socket stays on this machine
    host = address[0]
    if _is_ip(host):
        if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
            _refuse(address)
    elif host.lower() not in _LOCAL_NAMES:
        _refuse(address)


_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(self, address)
    _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(self, address)
    return _connect_ex(self, address)


socket.getaddrinfo = _guarded_getaddrinfo
socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]

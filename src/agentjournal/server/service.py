"""What every request shares: the journal, who the caller is, and what the caller may still do."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentjournal.aio import AsyncJournal
from agentjournal.keys import ApiKeys, key_id_of
from agentjournal.server.agent_host import AgentHost
from agentjournal.server.fanout import Fanout
from agentjournal.server.problems import Problem

__all__ = ["Limits", "Metrics", "Service", "StreamSlot", "is_loopback", "open_bind_refusal"]

_KEY_CACHE_SECONDS = 5.0  # a revoked key stops working within this long


@dataclass(frozen=True)
class Limits:
    """Per-request and per-key limits; each answered with its own problem."""

    max_body_bytes: int = 4 * 1024 * 1024
    max_streams_per_key: int = 100
    requests_per_second: float = 500.0
    burst: int = 1000
    heartbeat_seconds: float = 15.0
    retry_ms: int = 2000


class Metrics:
    """Prometheus metrics of one app (its own registry, so apps in one process don't collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.appended = Counter(
            "agentjournal_events_appended_total", "Events appended", registry=self.registry
        )
        self.append_seconds = Histogram(
            "agentjournal_append_seconds", "Append latency, until durable", registry=self.registry
        )
        self.open_streams = Gauge(
            "agentjournal_open_streams", "Open SSE streams", registry=self.registry
        )
        self.errors = Counter(
            "agentjournal_http_errors_total",
            "Responses with a 4xx or 5xx status",
            ["status"],
            registry=self.registry,
        )


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class Service:
    """The app's state: `open` means no API keys exist and everything is tenant 'default'."""

    journal: AsyncJournal
    keys: ApiKeys
    limits: Limits
    open: bool
    agent_host: AgentHost | None = None
    metrics: Metrics = field(default_factory=Metrics)
    fanout: Fanout = field(default_factory=Fanout)
    _known: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # tenant, id, until
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _streams: dict[str, int] = field(default_factory=dict)
    _tenants: dict[str, AsyncJournal] = field(default_factory=dict)

    def journal_for(self, tenant: str) -> AsyncJournal:
        """The journal scoped to `tenant`, made once per tenant: a scoped journal holds no state
        but its tenant, and making one checks the id again (on the event loop, per request)."""
        scoped = self._tenants.get(tenant)
        if scoped is None:
            scoped = self._tenants[tenant] = self.journal.for_tenant(tenant)
        return scoped

    def caller(self, authorization: str | None, client: str | None) -> tuple[str, str]:
        """(tenant, key id) of the request's bearer key; 401 without a valid one. In open mode,
        a request without a key is ("default", "open") if it comes from this machine (`client`:
        the peer's address, None on a Unix socket), 403 otherwise."""
        if authorization is None:
            if self.open:
                if client is not None and not is_loopback(client):
                    raise Problem(403, "Forbidden", _OPEN_REMOTE)
                return "default", "open"
            raise _unauthorized("send Authorization: Bearer <key> (create one: agentjournal keys)")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise _unauthorized("the Authorization header must be 'Bearer <key>'")
        key = key.strip()
        now = time.monotonic()
        known = self._known.get(key)
        if known is None or known[2] <= now:
            tenant = self.keys.tenant_of(key)
            if tenant is None:
                self._known.pop(key, None)
                raise _unauthorized("the API key is not valid (unknown, revoked or mistyped)")
            known = self._known[key] = (tenant, key_id_of(key), now + _KEY_CACHE_SECONDS)
        return known[0], known[1]

    def admit(self, key_id: str) -> None:
        """Token bucket per key: `requests_per_second`, bursts up to `burst`."""
        now = time.monotonic()
        limits = self.limits
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(limits.burst, now)
        bucket.tokens = min(
            limits.burst, bucket.tokens + (now - bucket.stamp) * limits.requests_per_second
        )
        bucket.stamp = now
        if bucket.tokens < 1:
            wait = (1 - bucket.tokens) / self.limits.requests_per_second
            raise Problem(
                429,
                "Too many requests",
                f"over {self.limits.requests_per_second:g} requests/s for this key; retry later",
                headers={"Retry-After": str(max(1, round(wait)))},
            )
        bucket.tokens -= 1

    def reserve_stream(self, key_id: str) -> StreamSlot:
        """Take one of the key's `max_streams_per_key` stream slots, or refuse (429). Checked
        and taken in one step, with no await between them, so simultaneous opens cannot all
        pass the check before any is counted; taken before the response starts, since a
        stream's status line goes out with its first frame. The caller releases it."""
        held = self._streams.get(key_id, 0)
        if held >= self.limits.max_streams_per_key:
            raise Problem(
                429,
                "Too many streams",
                f"this key already has {self.limits.max_streams_per_key} open streams",
            )
        self._streams[key_id] = held + 1
        self.metrics.open_streams.inc()
        return StreamSlot(self, key_id)

    def _release_stream(self, key_id: str) -> None:
        held = self._streams[key_id] - 1
        if held:
            self._streams[key_id] = held
        else:
            del self._streams[key_id]  # keys come and go: keep no entry for one with none open
        self.metrics.open_streams.dec()


class StreamSlot:
    """One open stream of a key, counted from admission until `release` (which only the first
    call does, so every path that ends a stream may call it)."""

    __slots__ = ("_key_id", "_service")

    def __init__(self, service: Service, key_id: str) -> None:
        self._service: Service | None = service
        self._key_id = key_id

    def release(self) -> None:
        service, self._service = self._service, None
        if service is not None:
            service._release_stream(self._key_id)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv4-mapped included) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def open_bind_refusal(host: str, keys_exist: bool) -> str | None:
    """Why serving on `host` is refused, or None: without API keys every caller is tenant
    'default', so an open service binds only to loopback (and answers only loopback callers,
    see `Service.caller`, whatever it was bound to)."""
    if keys_exist or is_loopback(host):
        return None
    return (
        f"refusing to bind {host}: no API keys exist, so every caller would be tenant"
        " 'default'. Create one (agentjournal keys create --tenant NAME) or pass --host 127.0.0.1."
    )


_OPEN_REMOTE = (
    "no API keys exist, so this service answers only callers on its own machine (every caller"
    " would be tenant 'default'); create a key (agentjournal keys create --tenant NAME)"
)


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})

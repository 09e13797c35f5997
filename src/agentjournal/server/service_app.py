"""`ServiceApp`: the FastAPI app of the service, which answers a well-formed append before
FastAPI's per-request layers.

Under load, what FastAPI does around every request before any middleware runs cost the event loop
more than the append's own part: its telemetry check looks for an OpenTelemetry provider on every
request (three `os.environ` lookups while none is configured), then Starlette's error and
body-limit layers wrap the call (bench/README.md, the wrk section). `ServiceApp` asks the
telemetry question once a second instead, and sends `POST /v1/sessions/{id}/events` straight
through the same steps the middleware stack gives it — the body read, counted, checked and parsed
as `BodyGuard` does, the append answered as `HotAppend` does (key, rate limit, validation,
metrics, problem+json), 4xx/5xx counted as `_CountErrors` does, an unexpected exception answered
by the app's own 500 handler as `ServerErrorMiddleware` does. The answer goes out as the two ASGI
messages a `Response` sends, with no wrapper around `send`: its status is known before it is
sent, so an error is counted there, and `ServerErrorMiddleware` is made only when something
failed (wrapping every append in it cost a closure per `send`). Anything the hot path does not
answer (an empty body, a body the route's models refuse) goes through the whole stack with the
body replayed, so FastAPI words it as before. While telemetry is on, behind a `root_path` or with
FastAPI's own `max_body_size`, every request takes FastAPI's way.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentjournal.server.body import PARSED_BODY, read_body, replaying
from agentjournal.server.hot import HOT_PATH, Answer, hot_answer, response_answer, send_answer
from agentjournal.server.service import Service

__all__ = ["ServiceApp"]

# How long a "no telemetry configured" answer is trusted: a provider configured while the service
# runs is picked up within this long (FastAPI then traces every request, appends included).
_TELEMETRY_RECHECK_SECONDS = 1.0


class ServiceApp(FastAPI):
    """FastAPI, with the append route answered before the framework's per-request layers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._telemetry_off = False
        self._telemetry_checked_until = float("-inf")
        self._direct_appends = 0  # how many appends were taken the direct way

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.root_path
            or getattr(self, "max_body_size", None) is not None
            or not self._telemetry_is_off()
        ):
            await super().__call__(scope, receive, send)
            return
        # What FastAPI.__call__ and Starlette.__call__ do for HTTP when telemetry is off.
        scope["app"] = self
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        if (
            scope["method"] == "POST"
            and not scope.get("root_path")
            and HOT_PATH.fullmatch(scope["path"]) is not None
        ):
            await self._append(scope, receive, send)
            return
        await self.middleware_stack(scope, receive, send)

    def _telemetry_is_off(self) -> bool:
        """FastAPI's own "is native telemetry enabled" answer, asked at most once a second.
        False (FastAPI's way for everything) on a FastAPI that does not say."""
        telemetry = getattr(self, "_native_telemetry", None)
        enabled = getattr(telemetry, "enabled", None)
        if enabled is None:
            return False
        now = time.monotonic()
        if now >= self._telemetry_checked_until:
            self._telemetry_off = not enabled()
            self._telemetry_checked_until = now + _TELEMETRY_RECHECK_SECONDS
        return self._telemetry_off

    def _error_handler(self) -> Any:
        """The handler `build_middleware_stack` gives `ServerErrorMiddleware`."""
        handler = None
        for key, value in self.exception_handlers.items():
            if key in (500, Exception):
                handler = value
        return handler

    async def _append(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`ServerErrorMiddleware` → `_CountErrors` → `BodyGuard` → `HotAppend`, in one call,
        the answer sent as the ASGI messages a `Response` sends; FastAPI's whole stack (with the
        body replayed, uncounted here: it counts its own) for what they pass on."""
        self._direct_appends += 1
        service: Service = self.state.service
        started = False
        try:
            read = await read_body(scope, receive, service.limits.max_body_bytes)
            if read is None:
                return  # the client went away mid-body: BodyGuard answers nothing either
            body, outcome = read
            answer: Answer | None
            if isinstance(outcome, Response):
                answer = response_answer(outcome)
            elif outcome is None:
                answer = None  # an empty body: FastAPI's 422
            else:
                scope[PARSED_BODY] = outcome.value
                answer = await hot_answer(service, scope)
            if answer is not None:
                status = answer[0]
                if status >= 400:
                    service.metrics.errors.labels(status=str(status)).inc()
                started = True  # as ServerErrorMiddleware notes it: before the start is sent
                await send_answer(answer, send)
                return
        except Exception as exc:
            if started:
                raise
            # ServerErrorMiddleware's own answer (the app's 500 handler, or its debug page),
            # made only when something failed; it raises the exception again for the server.
            await ServerErrorMiddleware(
                _raising(exc), handler=self._error_handler(), debug=self.debug
            )(scope, receive, send)
            raise
        assert self.middleware_stack is not None
        await self.middleware_stack(scope, replaying(body, receive), send)


def _raising(exc: Exception) -> ASGIApp:
    """An ASGI app that raises `exc` (for `ServerErrorMiddleware` to answer it)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise exc

    return app

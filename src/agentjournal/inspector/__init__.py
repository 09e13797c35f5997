"""The web inspector: one page at `/` and its files under `/inspector/`, served by the service
itself from `static/` (no build step, nothing fetched from elsewhere).

The page is a client of the public /v1 API like any other: when the API answers 401 it asks for
an API key, keeps it in the tab's sessionStorage and sends it as `Authorization: Bearer`, also
on its event streams, which it reads with fetch (EventSource cannot send that header). The
routes serve no data, so they need no key, and they stay out of the OpenAPI spec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

__all__ = ["router"]

PREFIX = "/inspector/"
# Files served at the root rather than under PREFIX: the page, and its icon where browsers (and
# anything else shown this service in a browser, such as /docs) look for one. An SVG under the
# .ico name: the page's <link rel="icon"> says its type, and browsers read an icon by its content.
_AT_ROOT = {"index.html": "/", "favicon.svg": "/favicon.ico"}
_MEDIA_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
# The page shows what agents and users wrote: only its own files may run or style it, and it
# may talk to nothing but this service.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def router() -> APIRouter:
    """GET `/` (the page), GET `/favicon.ico` (its icon) and GET `/inspector/<file>` for each
    other file in `static/`.

    One fixed path per file rather than a static mount or a `{name}` parameter: each is a plain
    GET route without path parameters, which the tests that enumerate the app's routes (the
    cross-tenant matrix) need nothing new for."""
    found = APIRouter(include_in_schema=False)
    for entry in sorted((files(__name__) / "static").iterdir(), key=lambda e: e.name):
        suffix = entry.name.rpartition(".")[2]
        if not entry.is_file() or suffix not in _MEDIA_TYPES:
            continue
        path = _AT_ROOT.get(entry.name, PREFIX + entry.name)
        found.add_api_route(
            path,
            _endpoint(entry.read_bytes(), _MEDIA_TYPES[suffix]),
            methods=["GET"],
            name=f"inspector:{entry.name}",
        )
    return found


def _endpoint(content: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def serve() -> Response:
        return Response(content, media_type=media_type, headers=_HEADERS)

    return serve

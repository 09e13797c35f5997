"""`GET /v1/search`: full-text search across the caller's sessions, one call to
`Journal.search` (docs/search.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from agentjournal.search import MAX_SEARCH_LIMIT, SearchHit
from agentjournal.server.routing import ERROR_RESPONSES, Tenant, journal_for

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, tags=["search"])


class SearchHitOut(BaseModel):
    session_id: str
    seq: int
    type: str
    created_at: int
    score: float = Field(description="higher is more relevant; comparable within one search")
    session_title: str
    snippet: str = Field(description="a piece of the event's text around its first match")
    highlights: list[list[int]] = Field(
        description="[start, end) offsets of the matched words in `snippet`, in code points"
    )
    source_id: str | None = Field(
        description="the id of the journal the hit's session was replicated from; null if it"
        " was written here",
    )

    @classmethod
    def of(cls, hit: SearchHit, source_id: str | None = None) -> SearchHitOut:
        return cls.model_construct(**hit.to_dict(), source_id=source_id)


class SearchPageOut(BaseModel):
    hits: list[SearchHitOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


@router.get("/search")
async def search(
    request: Request,
    tenant: Tenant,
    q: Annotated[str, Query(description="words to find; punctuation separates words")],
    session_status: Annotated[
        Literal["active", "archived", "deleted", "all"] | None,
        Query(description="default: active and archived sessions"),
    ] = None,
    since: Annotated[int | None, Query(ge=0, description="created_at >= since (unix ms)")] = None,
    until: Annotated[int | None, Query(ge=0, description="created_at < until (unix ms)")] = None,
    type: Annotated[list[str] | None, Query(description="event types (repeat for more)")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT)] = 20,
    cursor: Annotated[str | None, Query(max_length=40)] = None,
) -> SearchPageOut:
    """Events of the caller's sessions holding every word of `q`, best first, each with its
    session, seq and a snippet with the matched words' offsets. Ranked within the newest 1,000
    matches at a time; `next_cursor` goes on. 422 for a query without words or over 500
    characters; 501 where the database cannot search."""
    journal = journal_for(request, tenant)
    page = await journal.search(
        q,
        session_status=session_status,
        since=since,
        until=until,
        types=type,
        limit=limit,
        cursor=cursor,
    )
    # One lookup for the page: the source of each replicated session among the hits.
    sources = await journal.session_sources(list(dict.fromkeys(h.session_id for h in page.hits)))
    return SearchPageOut(
        hits=[SearchHitOut.of(hit, sources.get(hit.session_id)) for hit in page.hits],
        next_cursor=page.next_cursor,
    )

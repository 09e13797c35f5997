"""`search`: full-text search across sessions, and `search --rebuild` for the index."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.progress import TextColumn
from rich.text import Text

from agentjournal.cli.app import app
from agentjournal.cli.common import (
    EXIT_PROBLEMS,
    DbOption,
    JsonOption,
    ProgressOption,
    TenantOption,
    console,
    fail,
    local_time,
    opened,
    print_json,
    progress,
    wants_progress,
)
from agentjournal.search import SearchHit

__all__: list[str] = []


@app.command()
def search(
    query: Annotated[
        str | None,
        typer.Argument(
            metavar="QUERY", help="Words to find (punctuation separates words).", show_default=False
        ),
    ] = None,
    status: Annotated[
        Literal["active", "archived", "deleted", "all"] | None,
        typer.Option(help="Sessions of this status (default: active and archived)."),
    ] = None,
    type: Annotated[
        list[str] | None, typer.Option("--type", help="Only events of this type (repeatable).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="Show at most this many.")] = 20,
    rebuild: Annotated[
        bool,
        typer.Option(
            help="Rebuild the search index of the whole database from the journal (a database"
            " from before search, or one whose verify reports index differences)."
        ),
    ] = False,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
    show_progress: ProgressOption = None,
) -> None:
    """Find events whose text holds every word of QUERY, in every session of the tenant, best
    first; exit 1 if none matched.

    --json prints one object: {"hits": [...], "next_cursor": ...}; --rebuild without a QUERY
    prints {"events_indexed": N}. The rebuild's progress goes to stderr.

    Example: agentjournal search --db agent.db "order 1234" --type tool_result
    """
    with opened(db, tenant) as journal:
        if rebuild:
            count_column = TextColumn("{task.completed:,} events")
            with progress(wants_progress(show_progress, as_json), count_column) as shown:
                task = shown.add_task("rebuilding the search index", total=None)
                count = journal.reindex_search(
                    progress=lambda read: shown.update(task, completed=read)
                )
                shown.update(task, completed=count, total=count)
            if query is None:
                if as_json:
                    print_json({"events_indexed": count})
                else:
                    typer.echo(f"search index rebuilt from {count:,} events")
                return
        if query is None:
            fail("give a QUERY to search for (or --rebuild)")
        page = journal.search(query, session_status=status, types=type, limit=limit)
        sources = journal.session_sources(list(dict.fromkeys(h.session_id for h in page.hits)))
    if as_json:
        hits = [{**hit.to_dict(), "source_id": sources.get(hit.session_id)} for hit in page.hits]
        print_json({"hits": hits, "next_cursor": page.next_cursor})
    elif page.hits:
        _print_hits(page.hits, sources)
    else:
        typer.echo("no events matched", err=True)
    if not page.hits:
        raise typer.Exit(EXIT_PROBLEMS)


def _print_hits(hits: list[SearchHit], sources: dict[str, str]) -> None:
    """Two lines a hit: where it is (and the source of a replicated session), then its snippet
    with the words marked (a snippet wraps; a table would cut it on a narrow terminal)."""
    for hit in hits:
        title = f"{hit.session_title} " if hit.session_title else ""
        head = Text(f"{title}({hit.session_id}) #{hit.seq} · {hit.type} · ", style="bold")
        head.append(local_time(hit.created_at), style="dim")
        if hit.session_id in sources:
            head.append(f" · from {sources[hit.session_id]}", style="dim")
        snippet = Text("  " + hit.snippet)
        for start, end in hit.highlights:
            snippet.stylize("bold reverse", start + 2, end + 2)
        console.print(head)
        console.print(snippet)

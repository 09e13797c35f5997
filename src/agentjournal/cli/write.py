"""`create` and `append`: writing to the journal from a shell, through the same verbs (and so
the same rules and errors) as the library and the HTTP API.

JSON arguments are parsed as the API parses a request body (RFC 8259, no NaN, no duplicate
keys) before the database is opened, so a malformed one writes nothing, not even a new file.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.text import Text

from agentjournal.cli.app import app
from agentjournal.cli.common import (
    DbOption,
    JsonOption,
    TenantOption,
    console,
    fail,
    opened,
    print_json,
)
from agentjournal.cli.render import event_line
from agentjournal.cli.sessions import SessionArgument
from agentjournal.errors import InvalidEvent
from agentjournal.events import loads_strict

__all__: list[str] = []

IdempotencyKeyOption = Annotated[
    str | None,
    typer.Option(
        help="Make a retry safe: the same key again returns what the first call wrote.",
        show_default=False,
    ),
]


def _json_object(text: str | bytes, what: str) -> dict[str, Any]:
    """`text` as a JSON object, or a one-line error naming `what` (exit 2)."""
    try:
        value = loads_strict(text)
    except InvalidEvent as exc:
        fail(f"{what}: {exc}")
    if not isinstance(value, dict):
        fail(f"{what} must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


@app.command()
def create(
    title: Annotated[str, typer.Argument(help="The session's title.")] = "",
    session_id: Annotated[
        str | None,
        typer.Option(help="The id to give it (default: a new sess_… id).", show_default=False),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="The model it talks to.", show_default=False)
    ] = None,
    system_prompt: Annotated[
        str | None, typer.Option(help="The system prompt replay leads with.", show_default=False)
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option(help="A JSON object kept with the session.", show_default=False),
    ] = None,
    idempotency_key: IdempotencyKeyOption = None,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Create a session (its seq 1 is session_created) and print it; creates --db if missing.

    --json prints the session as `sessions --json` does. The same --idempotency-key again
    returns the session it created; with a different request it is a Conflict (exit 2).

    Example: agentjournal create "Refund desk" --metadata '{"customer": "c-42"}' --json
    """
    meta = None if metadata is None else _json_object(metadata, "--metadata")
    with opened(db, tenant, create=True) as journal:
        session, created = journal.create_session_ex(
            title,
            model=model,
            system_prompt=system_prompt,
            metadata=meta,
            session_id=session_id,
            idempotency_key=idempotency_key,
        )
    if as_json:
        print_json(session.to_dict())
        return
    line = Text("created session " if created else "already created under this key: session ")
    line.append(session.session_id, style="bold")
    if session.title:
        line.append(f' "{session.title}"')
    console.print(line, soft_wrap=True)


@app.command()
def append(
    session_id: SessionArgument,
    type: Annotated[
        str,
        typer.Argument(
            metavar="TYPE",
            help="user_message, assistant_message, tool_call, … or a namespaced myapp.thing.",
            show_default=False,
        ),
    ],
    payload: Annotated[
        str,
        typer.Argument(
            metavar="PAYLOAD",
            help="The payload, a JSON object; - reads it from standard input.",
            show_default=False,
        ),
    ],
    idempotency_key: IdempotencyKeyOption = None,
    expected_seq: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Append only if the session's last seq is this (else a Conflict, exit 2).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = "agent.db",
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Append one event to a session and print it once it is durable.

    The event passes the checks of Journal.append and POST /v1/sessions/{id}/events; one that
    fails them is not written (exit 2). --json prints the event as the API returns it.

    Example: agentjournal append sess_abc123 user_message '{"content": "Where is my order?"}'
    """
    text: str | bytes = sys.stdin.buffer.read() if payload == "-" else payload
    body = _json_object(text, "PAYLOAD")
    with opened(db, tenant) as journal:
        event = journal.append(
            session_id, type, body, idempotency_key=idempotency_key, expected_seq=expected_seq
        )
    if as_json:
        print_json(event.to_dict())
    else:
        console.print(event_line(event, with_session=False), soft_wrap=True)

"""Google ADK sessions as journal events: pure, no framework, no I/O.

An ADK session (app name, user id, session id) is one journal session. Its `session_created`
carries, in `metadata`, the app name, user id and ADK session id, the creation time and the
session-scoped state it was created with, and `pending`: it is an ADK session once its
`adk.session_opened` follows (written with its listing and the shared state it sets; a session
without `pending` was made whole). Each ADK `Event` is one `append_many` batch:

- the journal's own events for what the event says, so that replay, search, the transcript, the
  CLI and the inspector show an ADK conversation like any other: its text a `user_message`
  (author `user`) or an `assistant_message` (any agent; thoughts are left out), each function
  call a `tool_call` (`call_id`, `name`, `arguments` as JSON) and each function response a
  `tool_result` (`call_id`, `content`: the response as JSON);
- the last event of the batch carries the ADK event itself under `adk` (`adk.event` when the
  event has nothing the journal has a type for): `{"event": <the Event's JSON>, "state_seq":
  n}`, plus `"state": {...}` when the event changed the session's own state. `state_seq` is the
  seq of the event holding the session state as of this event (1: the `session_created`), so
  the newest event tells where the state is and reading a session never folds its history.

A call id the session used before, or a response whose call is not open, is not mirrored (the
journal's tool-call rules hold): the ADK event keeps it all the same.

App-scoped and user-scoped state live in journal sessions of their own (`adk.app_state`,
`adk.user_state`, each event the whole state after a change), and so do the directories that
list an app's users (`adk.user_listed`) and a user's sessions (`adk.session_listed`,
`adk.session_unlisted`). Journal session ids are derived from the ADK names by `journal_id`:
ADK names are free text, journal ids are not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any, Literal

from agentjournal.events import Event, NewEvent

__all__ = [
    "ADK_EVENT",
    "APP_STATE",
    "SESSION_LISTED",
    "SESSION_OPENED",
    "SESSION_UNLISTED",
    "USER_LISTED",
    "USER_STATE",
    "call_ids",
    "carried",
    "event_batch",
    "journal_id",
    "session_metadata",
]

ADK_EVENT = "adk.event"
APP_STATE = "adk.app_state"
USER_STATE = "adk.user_state"
USER_LISTED = "adk.user_listed"
SESSION_LISTED = "adk.session_listed"
SESSION_UNLISTED = "adk.session_unlisted"
SESSION_OPENED = "adk.session_opened"

Kind = Literal["session", "app", "user", "users", "sessions"]


def journal_id(kind: Kind, *names: str) -> str:
    """The journal session id of an ADK session (`kind="session"`, names app, user, session
    id), of an app's or a user's shared state (`"app"`, `"user"`), or of the directory of an
    app's users or of a user's sessions (`"users"`, `"sessions"`): a digest of the names, as
    ADK names may hold any text and a journal id only letters, digits and `_.:-`."""
    digest = hashlib.blake2b(json.dumps([kind, *names]).encode(), digest_size=16).hexdigest()
    return f"adk.{kind}.{digest}"


def session_metadata(
    app_name: str, user_id: str, session_id: str, created: float, state: Mapping[str, Any]
) -> dict[str, Any]:
    """The `metadata` of an ADK session's `session_created`."""
    return {
        "integration": "adk",
        "app_name": app_name,
        "user_id": user_id,
        "session_id": session_id,
        "created": created,
        "state": dict(state),
        # Created first, it is an ADK session once its `adk.session_opened` is written, in
        # one transaction with its listing and the app's and the user's state it sets.
        "pending": True,
    }


def event_batch(
    event: Mapping[str, Any],
    *,
    first_seq: int,
    state_seq: int,
    state: Mapping[str, Any] | None,
    used_calls: Collection[str],
    open_calls: Collection[str],
) -> list[NewEvent]:
    """The journal events of one ADK event (its JSON, as `Event.model_dump(mode="json",
    exclude_none=True)` gives it), to be appended at `first_seq` on. `state`: the session's own
    state after it, if it changed it (else `state_seq` says where the state is).
    `used_calls`: the session's call ids stored as `tool_call` already; `open_calls`: those of
    them still without a result."""
    used, waiting = set(used_calls), set(open_calls)
    mirrors: list[NewEvent] = []
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    user = event.get("author") == "user"
    texts: list[str] = []
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, Mapping):
            continue
        text = part.get("text")
        if isinstance(text, str) and not part.get("thought"):
            texts.append(text)
        call, response = part.get("function_call"), part.get("function_response")
        if isinstance(call, Mapping):
            call_id, name = call.get("id"), call.get("name")
            if isinstance(call_id, str) and call_id and _nonempty(name) and call_id not in used:
                used.add(call_id)
                waiting.add(call_id)
                arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
                mirrors.append(
                    NewEvent(
                        "tool_call", {"call_id": call_id, "name": name, "arguments": arguments}
                    )
                )
        if isinstance(response, Mapping):
            call_id = response.get("id")
            if isinstance(call_id, str) and call_id in waiting:
                waiting.discard(call_id)
                result = json.dumps(response.get("response") or {}, ensure_ascii=False)
                mirrors.append(NewEvent("tool_result", {"call_id": call_id, "content": result}))
    if texts:
        kind = "user_message" if user else "assistant_message"
        # The text comes before the calls it leads to, as a model gives them.
        mirrors.insert(0, NewEvent(kind, {"content": "".join(texts)}))
    own_seq = first_seq + max(len(mirrors), 1) - 1
    carrier: dict[str, Any] = {"event": dict(event), "state_seq": state_seq}
    if state is not None:
        carrier["state"], carrier["state_seq"] = dict(state), own_seq
    if not mirrors:
        return [NewEvent(ADK_EVENT, {"adk": carrier})]
    last = mirrors[-1]
    mirrors[-1] = NewEvent(last.type, {**last.payload, "adk": carrier})
    return mirrors


def carried(event: Event) -> dict[str, Any] | None:
    """The ADK payload a journal event carries (`event`, `state_seq`, maybe `state`), if any."""
    found = event.payload.get("adk")
    return found if isinstance(found, dict) and "event" in found else None


def call_ids(event: Mapping[str, Any]) -> set[str]:
    """The call ids an ADK event's function calls and responses name."""
    found: set[str] = set()
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, Mapping):
            continue
        for key in ("function_call", "function_response"):
            inner = part.get(key)
            if isinstance(inner, Mapping) and _nonempty(inner.get("id")):
                found.add(inner["id"])
    return found


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value)

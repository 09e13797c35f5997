"""How the CLI shows sessions, events, tasks and replays to a person: rich renderables built from
the journal's values, nothing read or written here."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from agentjournal.cli.common import local_time
from agentjournal.events import LANGGRAPH_TYPES, TASK_TYPES, Event
from agentjournal.projection import Session, Task, ToolCall

__all__ = [
    "describe",
    "event_line",
    "message_count",
    "replayed_messages",
    "session_header",
    "sessions_table",
    "tasks_table",
    "timeline",
]

_ROLES = {"user_message": "user", "assistant_message": "assistant", "system_message": "system"}
_ROLE_STYLES = {"user": "bold blue", "assistant": "bold green", "system": "bold magenta"}
_TASK_STYLES = {"completed": "green", "failed": "red", "cancelled": "dim", "running": "cyan"}
# How `show` labels the events that are not messages or tool calls (custom ones: "event").
_LABELS = {
    "session_created": ("session", "magenta"),
    "session_updated": ("session", "magenta"),
    "session_forked": ("session", "magenta"),
    "context_compacted": ("compacted", "magenta"),
    **dict.fromkeys(TASK_TYPES, ("task", "cyan")),
}


def sessions_table(found: list[Session], sources: dict[str, str] | None = None) -> Table:
    """`sources`: the source each replicated session came from; a Source column when any."""
    # Only the title gives way on a narrow terminal: ids and times stay whole.
    sources = sources or {}
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, expand=True)
    table.add_column("Session", no_wrap=True, min_width=max(len(s.session_id) for s in found))
    table.add_column("Title", no_wrap=True, overflow="ellipsis", ratio=1)
    table.add_column("Status", no_wrap=True, min_width=8)
    table.add_column("Events", justify="right", no_wrap=True, min_width=6)
    table.add_column("Last activity", no_wrap=True, min_width=19)
    table.add_column("Turn", no_wrap=True, min_width=4)
    if sources:
        table.add_column("Source", no_wrap=True, min_width=max(map(len, sources.values())))
    for s in found:
        row: list[str | Text] = [
            s.session_id,
            Text(s.title),
            s.status,
            str(s.event_count),
            local_time(s.updated_at),
            "open" if s.turn_open else "",
        ]
        table.add_row(*row, *([sources.get(s.session_id, "")] if sources else []))
    return table


def session_header(session: Session, messages: int | None, calls: int, tasks: int) -> Text:
    """The session's facts; `messages` is None when only part of the session was read."""
    header = Text.assemble(
        (session.title or "(untitled)", "bold"), "  ", (session.session_id, "dim")
    )
    facts = [session.status, f"model {session.model}" if session.model else "no model"]
    facts.append(_count(session.event_count, "event"))
    if messages is not None:
        facts.append(_count(messages, "message"))
    facts += [_count(calls, "tool call"), _count(tasks, "task")]
    facts += [f"tokens {session.prompt_tokens} in / {session.completion_tokens} out"]
    header.append("\n" + " · ".join(facts))
    times = [f"created {local_time(session.created_at)}"]
    times += [f"last activity {local_time(session.updated_at)}"]
    if session.forked_from:
        times.append(f"forked from {session.forked_from} at #{session.forked_at_seq}")
    if session.turn_open:
        times.append("turn open")
    header.append("\n" + " · ".join(times), style="dim")
    if session.system_prompt:
        header.append("\nsystem prompt: ", style="bold magenta")
        header.append(session.system_prompt)
    return header


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'' if number == 1 else 's'}"


def timeline(events: list[Event], calls: dict[str, ToolCall]) -> Table:
    """One row per event; a model response's tool calls sit under it with their results (which
    the journal may hold far below), so the tool_result events themselves need no row."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True, style="dim")
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    previous = ""  # as replay folds it: a tool call after text or a call joins that response
    for event in events:
        kind, payload, seq = event.type, event.payload, f"#{event.seq}"
        if kind in _ROLES:
            role = _ROLES[kind]
            body = Text(payload["content"])
            if "supersedes" in payload:
                body = Text(f"(corrects #{payload['supersedes']}) ", style="italic") + body
            grid.add_row(seq, Text(role, style=_ROLE_STYLES[role]), body)
            is_text = kind == "assistant_message" and "supersedes" not in payload
            previous = "text" if is_text else kind
        elif kind == "tool_call":
            if previous not in ("text", "tool_call"):
                grid.add_row("", Text("assistant", style=_ROLE_STYLES["assistant"]), "")
            grid.add_row(seq, Text("  ↳ tool", style="cyan"), _call_body(event, calls))
            previous = kind
        elif kind == "tool_result":
            if payload["call_id"] not in calls:  # no call to show it under
                grid.add_row(seq, Text("  ↳ result", style="cyan"), Text(describe(event)))
            previous = kind
        else:
            label, style = _LABELS.get(kind, ("event", "yellow"))
            body = Text(describe(event))
            if kind not in _LABELS:  # a custom event: its type, then its payload
                body = Text(f"{kind} ", style="yellow") + body
            grid.add_row(seq, Text(label, style=style), body)
    return grid


def _call_body(event: Event, calls: dict[str, ToolCall]) -> Text:
    payload = event.payload
    body = Text.assemble((payload["name"], "bold"), " ", payload["arguments"])
    body.append(f"  [{payload['call_id']}]", style="dim")
    call = calls.get(payload["call_id"])
    if call is None or call.result is None:
        body.append("\n→ pending (no result yet)", style="dim italic")
        return body
    style = "red" if call.status == "error" else "green"
    body.append(f"\n→ {call.status} #{call.result_seq}: ", style=style)
    body.append(call.result)
    return body


def tasks_table(tasks: list[Task]) -> Table:
    """Two lines a task: its bar, then what it is and how it went."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for task in tasks:
        percent = 100.0 if task.status == "completed" else task.progress * 100
        note = task.error if task.status == "failed" else task.message
        about = Text.assemble(
            (task.type, "bold"),
            " ",
            (task.status, _TASK_STYLES.get(task.status, "")),
            f" · attempt {task.attempt} · retries {task.retry_count}/{task.max_retries}\n",
            (task.task_id, "dim"),
        )
        if note:
            about.append(f" · {note}")
        grid.add_row(ProgressBar(total=100, completed=percent, width=20), f"{percent:.0f}%", about)
    return grid


def describe(event: Event) -> str:
    """An event as one short phrase (what `tail` prints after the type)."""
    kind, p = event.type, event.payload
    if kind in _ROLES:
        corrects = f"(corrects #{p['supersedes']}) " if "supersedes" in p else ""
        return f"{corrects}{p['content']}"
    if kind == "tool_call":
        return f"{p['name']} {p['arguments']} [{p['call_id']}]"
    if kind == "tool_result":
        return f"[{p['call_id']}] {'error: ' if p.get('is_error') else ''}{p['content']}"
    if kind == "context_compacted":
        return f"up to #{p['until_seq']}: {p['summary']}"
    if kind == "session_created":
        model = f" (model {p['model']})" if p.get("model") else ""
        return f"created {json.dumps(p['title'], ensure_ascii=False)}{model}"
    if kind == "session_updated":
        return "updated " + ", ".join(f"{k} = {_compact(v)}" for k, v in sorted(p.items()))
    if kind == "session_forked":
        return f"forked from {p['from_session_id']} at #{p['at_seq']}"
    if kind in TASK_TYPES:
        return f"{p['task_id']} {_task_phrase(kind, p)}"
    if kind in LANGGRAPH_TYPES:
        return _langgraph_phrase(kind, p)
    return _compact(p)


def _langgraph_phrase(kind: str, p: dict[str, Any]) -> str:
    """A LangGraph checkpoint's events without their serialised bytes (`replay` and the
    inspector's raw JSON have those)."""
    ns = f" in {p['ns']}" if p.get("ns") else ""
    if kind == "langgraph.checkpoint":
        parent = f" after {p['parent_id']}" if p.get("parent_id") else ""
        return f"checkpoint {p['checkpoint_id']}{ns}{parent} ({len(p['blobs'])} channels)"
    if kind == "langgraph.blob":
        size = len(p["value"].get("data", "")) * 3 // 4
        grows = f", extends #{p['base']}" if "base" in p else ""
        return f"{p['channel']}{ns} = {p['value']['type']} of {size} bytes{grows}"
    if kind == "langgraph.writes":
        channels = ", ".join(channel for _, channel, _ in p["writes"])
        task = p["task_path"] or p["task_id"]
        return f"writes for {p['checkpoint_id']}{ns} by {task}: {channels}"
    if kind == "langgraph.message":
        message = p["message"]
        data = message.get("data", {}) if isinstance(message.get("data"), dict) else {}
        return f"{message.get('type', 'message')}: {_compact(data.get('content', ''))}"
    return _compact(p)


def _task_phrase(kind: str, p: dict[str, Any]) -> str:
    if kind == "task_created":
        return f"created ({p['type']}): {_compact(p['input'])}"
    if kind == "task_started":
        return f"started by {p['worker']} (attempt {p['attempt']})"
    if kind == "task_progress":
        note = f": {p['message']}" if p.get("message") else ""
        return f"progress {p['progress'] * 100:.0f}% (attempt {p['attempt']}){note}"
    if kind == "task_completed":
        return f"completed (attempt {p['attempt']}): {_compact(p['output'])}"
    if kind == "task_failed":
        again = ", will retry" if p["retry"] else ""
        return f"failed (attempt {p['attempt']}{again}): {p['error']}"
    return "cancelled" + (f": {p['reason']}" if p.get("reason") else "")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _replayed_body(message: dict[str, Any]) -> Text:
    body = Text()
    content = message.get("content")
    if "role" not in message:  # a Responses input item other than a message
        return _item_body(message)
    if message["role"] == "tool":
        body.append(f"[{message['tool_call_id']}] ", style="dim")
    if isinstance(content, str):
        body.append(content)
    for block in content if isinstance(content, list) else ():
        if body:
            body.append("\n")
        if block["type"] in ("text", "input_text", "output_text"):
            body.append(block["text"])
        elif block["type"] == "tool_use":
            body.append(f"→ {block['name']} {_compact(block['input'])}", style="cyan")
            body.append(f"  [{block['id']}]", style="dim")
        else:  # tool_result
            body.append(f"[{block['tool_use_id']}] ", style="dim")
            if block.get("is_error"):
                body.append("error: ", style="red")
            body.append(str(block["content"]))
    for call in message.get("tool_calls") or ():
        if body:
            body.append("\n")
        function = call["function"]
        body.append(f"→ {function['name']} {function['arguments']}", style="cyan")
        body.append(f"  [{call['id']}]", style="dim")
    return body


def event_line(event: Event, with_session: bool) -> Text:
    line = Text()
    if with_session:
        line.append(f"@{event.position} {event.session_id} ", style="dim")
    line.append(f"#{event.seq} ", style="bold")
    line.append(f"{local_time(event.created_at)} ", style="dim")
    line.append(f"{event.type} ", style="cyan")
    line.append(describe(event).replace("\r", "\\r").replace("\n", "\\n"))
    return line


def message_count(events: list[Event]) -> int:
    """Messages as a person counts them: a correction replaces one, it is not another."""
    return sum(1 for e in events if e.type in _ROLES and "supersedes" not in e.payload)


def replayed_messages(replayed: list[dict[str, Any]] | dict[str, Any]) -> Table:
    """What `Journal.replay` returned, a row a message (anthropic's system prompt first)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    if isinstance(replayed, dict):  # anthropic: {system, messages}
        if replayed["system"]:
            grid.add_row(Text("system", style=_ROLE_STYLES["system"]), Text(replayed["system"]))
        messages = replayed["messages"]
    else:
        messages = replayed
    for message in messages:
        role = message.get("role") or message.get("type", "item")
        grid.add_row(Text(role, style=_ROLE_STYLES.get(role, "cyan")), _replayed_body(message))
    return grid


def _item_body(item: dict[str, Any]) -> Text:
    """A Responses item: a function call or its output as `show` prints them, others as JSON."""
    body = Text()
    if item.get("type") == "function_call":
        body.append(f"→ {item.get('name')} {item.get('arguments')}", style="cyan")
        body.append(f"  [{item.get('call_id')}]", style="dim")
    elif item.get("type") == "function_call_output":
        body.append(f"[{item.get('call_id')}] ", style="dim")
        output = item.get("output")
        body.append(output if isinstance(output, str) else _compact(output))
    else:
        body.append(_compact(item), style="dim")
    return body

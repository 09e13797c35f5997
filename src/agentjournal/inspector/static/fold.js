// Pure folds of a session's events (seq 1..N, in order) into what the page shows: the timeline
// as a person reads a chat, and the tasks. No DOM here. `upto` is the time-travel point: only
// events with seq <= upto count, so the page shows the session as it was after that event.

const MESSAGE_ROLES = {
  user_message: "user",
  assistant_message: "assistant",
  system_message: "system",
};

/**
 * Timeline items, in order. Kinds: "user" and "system" (a message), "assistant" (one turn:
 * its texts and tool calls in order, each call with its result, wherever that was appended),
 * "correction", "compacted", "created", "updated", "forked", "task", "event" (anything else,
 * including namespaced custom events). Each item has a stable `key` and a `version` that
 * changes whenever anything it shows changes.
 */
export function buildItems(events, upto) {
  const items = [];
  const messages = new Map(); // seq of an original message -> the item or part showing it
  const calls = new Map(); // call_id -> {call, result, turn}
  const taskTypes = new Map();
  let turn = null;

  const add = (item) => {
    item.events = item.events ?? [item.event];
    items.push(item);
    return item;
  };
  const startTurn = (event) =>
    add({ kind: "assistant", key: `turn:${event.seq}`, seq: event.seq, parts: [], events: [] });

  for (const event of events) {
    if (event.seq > upto) break;
    const payload = event.payload ?? {};
    const role = MESSAGE_ROLES[event.type];
    if (role && payload.supersedes !== undefined) {
      const original = messages.get(payload.supersedes);
      if (original) {
        original.content = String(payload.content ?? "");
        original.editedSeq = event.seq;
        original.owner.events.push(event);
      }
      add({
        kind: "correction",
        key: `correction:${event.seq}`,
        event,
        target: payload.supersedes,
      });
      turn = null;
    } else if (role === "assistant") {
      if (turn === null || turn.parts.at(-1)?.kind === "text") turn = startTurn(event);
      const part = { kind: "text", event, content: String(payload.content ?? ""), owner: turn };
      turn.parts.push(part);
      turn.events.push(event);
      messages.set(event.seq, part);
      if (payload.usage) turn.usage = payload.usage;
    } else if (role) {
      const item = add({ kind: role, key: `message:${event.seq}`, event });
      item.content = String(payload.content ?? "");
      item.owner = item;
      messages.set(event.seq, item);
      turn = null;
    } else if (event.type === "tool_call") {
      if (turn === null) turn = startTurn(event);
      const part = { kind: "call", call: event, result: null, owner: turn };
      turn.parts.push(part);
      turn.events.push(event);
      calls.set(payload.call_id, part);
    } else if (event.type === "tool_result" && calls.has(payload.call_id)) {
      const part = calls.get(payload.call_id);
      part.result = event;
      part.owner.events.push(event);
    } else if (event.type === "context_compacted") {
      add({ kind: "compacted", key: `event:${event.seq}`, event });
      turn = null;
    } else if (event.type === "session_created") {
      add({ kind: "created", key: `event:${event.seq}`, event });
    } else if (event.type === "session_updated") {
      add({ kind: "updated", key: `event:${event.seq}`, event });
    } else if (event.type === "session_forked") {
      add({ kind: "forked", key: `event:${event.seq}`, event });
    } else if (event.type.startsWith("task_")) {
      if (event.type === "task_created") taskTypes.set(payload.task_id, payload.type);
      const taskType = taskTypes.get(payload.task_id) ?? "task";
      add({ kind: "task", key: `event:${event.seq}`, event, taskType });
    } else {
      add({ kind: "event", key: `event:${event.seq}`, event });
    }
  }
  for (const item of items) item.version = `${item.key}@${item.events.map((e) => e.seq)}`;
  return items;
}

/**
 * The session's tasks as of `upto`, folded from task_* events as the journal's projection does.
 * `isTask(task_id)` says which task ids are this session's own: a fork copies its parent's task
 * events, but those create no tasks in the fork.
 */
export function foldTasks(events, upto, isTask) {
  const tasks = new Map();
  for (const event of events) {
    if (event.seq > upto) break;
    if (!event.type.startsWith("task_")) continue;
    const payload = event.payload ?? {};
    if (!isTask(payload.task_id)) continue;
    if (event.type === "task_created") {
      tasks.set(payload.task_id, {
        task_id: payload.task_id,
        type: payload.type,
        input: payload.input ?? null,
        parent_task_id: payload.parent_task_id ?? null,
        status: "pending",
        progress: 0,
        message: null,
        output: null,
        error: null,
        attempt: 0,
        retry_count: 0,
        max_retries: payload.max_retries ?? 3,
        lease_owner: null,
        created_seq: event.seq,
        updated_seq: event.seq,
      });
      continue;
    }
    const task = tasks.get(payload.task_id);
    if (!task) continue;
    task.updated_seq = event.seq;
    if (event.type === "task_started") {
      Object.assign(task, {
        status: "running",
        attempt: payload.attempt,
        lease_owner: payload.worker,
      });
    } else if (event.type === "task_progress") {
      Object.assign(task, { progress: Number(payload.progress), message: payload.message ?? null });
    } else if (event.type === "task_completed") {
      Object.assign(task, { status: "completed", progress: 1, output: payload.output ?? null });
      task.lease_owner = null;
    } else if (event.type === "task_failed") {
      task.status = payload.retry ? "pending" : "failed";
      Object.assign(task, { error: payload.error ?? null, retry_count: payload.retry_count ?? 0 });
      task.lease_owner = null;
    } else if (event.type === "task_cancelled") {
      Object.assign(task, {
        status: "cancelled",
        error: payload.reason ?? null,
        lease_owner: null,
      });
    }
  }
  return [...tasks.values()];
}

/** A short description of an event, for announcements and the slider's value text. */
export function describe(event) {
  if (!event) return "";
  const payload = event.payload ?? {};
  switch (event.type) {
    case "user_message":
      return "user message";
    case "assistant_message":
      return "assistant message";
    case "system_message":
      return "system message";
    case "tool_call":
      return `tool call ${payload.name ?? ""}`.trim();
    case "tool_result":
      return payload.is_error ? "tool error" : "tool result";
    default:
      return event.type.replaceAll("_", " ");
  }
}

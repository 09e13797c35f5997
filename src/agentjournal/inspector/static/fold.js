// Pure folds of a session's events (seq 1..N, in order) into what the page shows: the timeline
// as a person reads a chat, and the tasks. No DOM here. The time-travel point `upto` is the last
// event folded: the page shows the session as it was after that event.

const MESSAGE_ROLES = {
  user_message: "user",
  assistant_message: "assistant",
  system_message: "system",
};

/**
 * A session's events folded, one at a time and in seq order, into what the page shows as of the
 * last one pushed: `items`, the timeline as a person reads a chat, and `tasks()`. Pushing one
 * live event costs the same however long the session is; time travel folds afresh.
 *
 * Item kinds: "user" and "system" (a message), "assistant" (one turn: its texts and tool calls
 * in order, each call with its result, wherever that was appended), "correction", "compacted",
 * "created", "updated", "forked", "task", "result" (a tool result whose call was not pushed: it
 * is before the loaded window), "event" (anything else, including namespaced custom events). Each item has a stable `key`, and `events`, the events it shows: they only ever grow,
 * so their count versions the item.
 *
 * `isTask(task_id)` says which task ids are this session's own: a fork copies its parent's task
 * events, but those create no tasks in the fork.
 */
export class Fold {
  constructor(isTask) {
    this.isTask = isTask;
    this.items = [];
    this.messages = new Map(); // seq of an original message -> the item or part showing it
    this.calls = new Map(); // call_id -> the turn's part showing the call
    this.taskTypes = new Map();
    this.taskMap = new Map();
    this.turn = null;
    this.first = null; // the seq of the first event pushed
  }

  /** The fold of the events with seq <= upto. */
  static of(events, upto, isTask) {
    const fold = new Fold(isTask);
    for (const event of events) {
      if (event.seq > upto) break;
      fold.push(event);
    }
    return fold;
  }

  /** The session's tasks as of the last event pushed, as the journal's projection has them. */
  tasks() {
    return [...this.taskMap.values()];
  }

  push(event) {
    this.first ??= event.seq;
    this.pushItem(event);
    if (event.type.startsWith("task_")) this.pushTask(event);
  }

  add(item) {
    item.events = item.events ?? [item.event];
    this.items.push(item);
    return item;
  }

  startTurn(event) {
    this.turn = this.add({
      kind: "assistant",
      key: `turn:${event.seq}`,
      seq: event.seq,
      parts: [],
      events: [],
    });
    return this.turn;
  }

  pushItem(event) {
    const payload = event.payload ?? {};
    const role = MESSAGE_ROLES[event.type];
    if (role && payload.supersedes !== undefined) {
      const original = this.messages.get(payload.supersedes);
      if (original) {
        original.content = String(payload.content ?? "");
        original.editedSeq = event.seq;
        original.owner.events.push(event);
      }
      this.add({
        kind: "correction",
        key: `correction:${event.seq}`,
        event,
        target: payload.supersedes,
      });
      this.turn = null;
    } else if (role === "assistant") {
      let turn = this.turn;
      if (turn === null || turn.parts.at(-1)?.kind === "text") turn = this.startTurn(event);
      const part = { kind: "text", event, content: String(payload.content ?? ""), owner: turn };
      turn.parts.push(part);
      turn.events.push(event);
      this.messages.set(event.seq, part);
      if (payload.usage) turn.usage = payload.usage;
    } else if (role) {
      const item = this.add({ kind: role, key: `message:${event.seq}`, event });
      item.content = String(payload.content ?? "");
      item.owner = item;
      this.messages.set(event.seq, item);
      this.turn = null;
    } else if (event.type === "tool_call") {
      const turn = this.turn ?? this.startTurn(event);
      const part = { kind: "call", call: event, result: null, owner: turn };
      turn.parts.push(part);
      turn.events.push(event);
      this.calls.set(payload.call_id, part);
    } else if (event.type === "tool_result" && this.calls.has(payload.call_id)) {
      const part = this.calls.get(payload.call_id);
      part.result = event;
      part.owner.events.push(event);
    } else if (event.type === "tool_result") {
      // Its call is before the first event loaded (a long session is loaded a window at a time).
      this.add({ kind: "result", key: `event:${event.seq}`, event });
    } else if (event.type === "context_compacted") {
      this.add({ kind: "compacted", key: `event:${event.seq}`, event });
      this.turn = null;
    } else if (event.type === "session_created") {
      this.add({ kind: "created", key: `event:${event.seq}`, event });
    } else if (event.type === "session_updated") {
      this.add({ kind: "updated", key: `event:${event.seq}`, event });
    } else if (event.type === "session_forked") {
      this.add({ kind: "forked", key: `event:${event.seq}`, event });
    } else if (event.type.startsWith("task_")) {
      if (event.type === "task_created") this.taskTypes.set(payload.task_id, payload.type);
      const taskType = this.taskTypes.get(payload.task_id) ?? "task";
      this.add({ kind: "task", key: `event:${event.seq}`, event, taskType });
    } else {
      this.add({ kind: "event", key: `event:${event.seq}`, event });
    }
  }

  /** A task_* event, folded as the journal's projection does; `updated_seq` versions a task. */
  pushTask(event) {
    const payload = event.payload ?? {};
    if (!this.isTask(payload.task_id)) return;
    if (event.type === "task_created") {
      this.taskMap.set(payload.task_id, {
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
      return;
    }
    const task = this.taskMap.get(payload.task_id);
    if (!task) return;
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

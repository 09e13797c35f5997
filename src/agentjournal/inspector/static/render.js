// The timeline's items and the tasks' cards, built with dom.js: data only ever becomes text.

import { details, h, percent, pretty, time } from "./dom.js";

function raw(ctx, event, label = "Raw JSON") {
  return details(
    ctx,
    `raw:${event.seq}`,
    { class: "raw", dataset: { seq: event.seq } },
    [label, h("span", { class: "visually-hidden" }, ` of event ${event.seq}`)],
    () => h("pre", { class: "code json" }, JSON.stringify(event, null, 2)),
  );
}

function seqButton(ctx, seq) {
  return h(
    "button",
    {
      type: "button",
      class: "seq",
      "aria-label": `Show the session as of event ${seq}`,
      title: `Time travel to event ${seq}`,
      onclick: () => ctx.travelTo(seq),
    },
    `#${seq}`,
  );
}

function head(ctx, who, event, ...extra) {
  return h(
    "div",
    { class: "item-head" },
    h("span", { class: "who" }, who),
    seqButton(ctx, event.seq),
    ...extra,
    time(event.created_at),
  );
}

function edited(item) {
  return item.editedSeq ? h("span", { class: "edited" }, `edited by #${item.editedSeq}`) : null;
}

function toolCall(ctx, part) {
  const { call, result } = part;
  const payload = call.payload;
  const status = result === null ? "waiting" : result.payload.is_error ? "error" : "ok";
  const statusText = { waiting: "waiting for result", error: "error", ok: "ok" }[status];
  const summary = [
    h("span", { class: "tool-icon", "aria-hidden": "true" }, "ƒ"),
    h("span", { class: "tool-name" }, String(payload.name)),
    h("span", { class: `badge badge-${status}` }, statusText),
    h("span", { class: "tool-seqs" }, result ? `#${call.seq} → #${result.seq}` : `#${call.seq}`),
  ];
  return details(
    ctx,
    `call:${payload.call_id}`,
    { class: `tool-call tool-${status}`, dataset: { callId: payload.call_id } },
    summary,
    () => [
      h("p", { class: "label" }, "Arguments"),
      h("pre", { class: "code arguments" }, pretty(payload.arguments)),
      h("p", { class: "label" }, result && result.payload.is_error ? "Error" : "Result"),
      result
        ? h(
            "pre",
            { class: `code result${result.payload.is_error ? " is-error" : ""}` },
            pretty(String(result.payload.content)),
          )
        : h("p", { class: "muted" }, "No result yet."),
      h(
        "div",
        { class: "raw-row" },
        raw(ctx, call, "Raw call JSON"),
        result ? raw(ctx, result, "Raw result JSON") : null,
      ),
    ],
  );
}

function taskNote(item) {
  const payload = item.event.payload;
  const name = item.taskType;
  switch (item.event.type) {
    case "task_created":
      return `Task ${name} queued`;
    case "task_started":
      return `Task ${name} started: attempt ${payload.attempt} by ${payload.worker}`;
    case "task_progress":
      return `Task ${name} at ${percent(payload.progress)}%${payload.message ? `: ${payload.message}` : ""}`;
    case "task_completed":
      return `Task ${name} completed`;
    case "task_failed":
      return `Task ${name} failed${payload.retry ? " (will retry)" : ""}: ${payload.error}`;
    case "task_cancelled":
      return `Task ${name} cancelled${payload.reason ? `: ${payload.reason}` : ""}`;
    default:
      return `Task ${name}: ${item.event.type}`;
  }
}

function sessionUpdate(payload) {
  const changes = [];
  if ("title" in payload) changes.push(`renamed to “${payload.title}”`);
  if ("status" in payload) changes.push(`status set to ${payload.status}`);
  if ("metadata" in payload) changes.push("metadata replaced");
  return `Session ${changes.join(", ") || "updated"}`;
}

function noteLine(ctx, event, ...content) {
  return h(
    "div",
    { class: "note-line" },
    seqButton(ctx, event.seq),
    h("span", { class: "note-text" }, ...content),
    time(event.created_at),
    raw(ctx, event),
  );
}

function note(ctx, item, cls, ...content) {
  return h(
    "li",
    { class: `item note ${cls}`, dataset: { seq: item.event.seq, type: item.event.type } },
    noteLine(ctx, item.event, ...content),
  );
}

/** The <li> of one timeline item. ctx: {open: Set, travelTo(seq), sessionLink(id)}. */
export function renderItem(ctx, item) {
  const event = item.event ?? item.events[0];
  const payload = event.payload ?? {};
  switch (item.kind) {
    case "user":
    case "system":
      return h(
        "li",
        { class: `item message ${item.kind}`, dataset: { seq: event.seq, type: event.type } },
        h(
          "article",
          { class: "bubble", "aria-label": `${item.kind} message, event ${event.seq}` },
          head(ctx, item.kind === "user" ? "User" : "System", event, edited(item)),
          h("p", { class: "content" }, item.content),
          h("div", { class: "raw-row" }, raw(ctx, event)),
        ),
      );
    case "assistant":
      return h(
        "li",
        { class: "item message assistant", dataset: { seq: item.seq, type: "assistant_turn" } },
        h(
          "article",
          { class: "bubble", "aria-label": `assistant turn from event ${item.seq}` },
          head(
            ctx,
            "Assistant",
            item.parts[0].kind === "text" ? item.parts[0].event : item.parts[0].call,
            item.usage
              ? h(
                  "span",
                  { class: "usage" },
                  `${item.usage.prompt_tokens ?? 0} → ${item.usage.completion_tokens ?? 0} tokens`,
                )
              : null,
          ),
          item.parts.map((part) =>
            part.kind === "call"
              ? toolCall(ctx, part)
              : h(
                  "div",
                  { class: "text-part", dataset: { seq: part.event.seq } },
                  h("p", { class: "content" }, part.content),
                  h("div", { class: "raw-row" }, edited(part), raw(ctx, part.event)),
                ),
          ),
        ),
      );
    case "correction":
      return note(
        ctx,
        item,
        "correction",
        `Correction of event #${item.target}: “${payload.content}”`,
      );
    case "compacted":
      return h(
        "li",
        { class: "item note compacted", dataset: { seq: event.seq, type: event.type } },
        noteLine(ctx, event, `Context compacted through event #${payload.until_seq}`),
        details(ctx, `summary:${event.seq}`, { class: "summary" }, "Summary", () =>
          h("p", { class: "content" }, String(payload.summary)),
        ),
      );
    case "created":
      return h(
        "li",
        { class: "item note created", dataset: { seq: event.seq, type: event.type } },
        noteLine(
          ctx,
          event,
          `Session created: “${payload.title ?? ""}”${payload.model ? ` · model ${payload.model}` : ""}`,
        ),
        payload.system_prompt
          ? h(
              "div",
              { class: "system-prompt" },
              h("p", { class: "label" }, "System prompt"),
              h("p", { class: "content" }, String(payload.system_prompt)),
            )
          : null,
      );
    case "updated":
      return note(ctx, item, "updated", sessionUpdate(payload));
    case "result":
      return note(
        ctx,
        item,
        "orphan-result",
        `${payload.is_error ? "Error" : "Result"} of tool call ${payload.call_id} (the call is further up): `,
        h("code", {}, String(payload.content).slice(0, 300)),
      );
    case "forked":
      return note(
        ctx,
        item,
        "forked",
        "Forked from ",
        ctx.sessionLink(String(payload.from_session_id)),
        ` at event #${payload.at_seq}`,
      );
    case "task":
      return note(ctx, item, "task-event", taskNote(item));
    default:
      return h(
        "li",
        { class: "item note custom", dataset: { seq: event.seq, type: event.type } },
        noteLine(ctx, event, h("code", { class: "event-type" }, event.type)),
        h("pre", { class: "code payload" }, JSON.stringify(payload, null, 2)),
      );
  }
}

/** The last characters of a task id: its random part, enough to tell two tasks apart. */
const shortId = (taskId) => String(taskId).slice(-6);

/** The <li> of one task: its type, status and a progress bar. */
export function renderTask(ctx, task) {
  const value = percent(task.progress);
  const messageId = `task-message-${task.task_id}`;
  return h(
    "li",
    { class: `task task-${task.status}`, dataset: { taskId: task.task_id } },
    h(
      "div",
      { class: "task-head" },
      h("span", { class: "task-type" }, String(task.type)),
      h("span", { class: `badge badge-${task.status}` }, task.status),
    ),
    h(
      "progress",
      {
        max: "100",
        value: String(value),
        // Named by its type and id: two tasks of one type must not have the same name.
        "aria-label": `${task.type}, task …${shortId(task.task_id)}`,
        "aria-describedby": task.message ? messageId : null,
        "aria-valuetext": `${value}%`,
      },
      `${value}%`,
    ),
    h(
      "div",
      { class: "task-line" },
      h("span", { class: "pct" }, `${value}%`),
      task.message
        ? h("span", { class: "task-message", id: messageId }, String(task.message))
        : null,
    ),
    h(
      "p",
      { class: "task-meta" },
      h("code", {}, task.task_id),
      task.attempt ? ` · attempt ${task.attempt}` : "",
      task.lease_owner ? ` · ${task.lease_owner}` : "",
    ),
    task.error ? h("p", { class: "error-text" }, String(task.error)) : null,
    task.status === "completed" && task.output !== null
      ? details(ctx, `output:${task.task_id}`, { class: "output" }, "Output", () =>
          h("pre", { class: "code" }, JSON.stringify(task.output, null, 2)),
        )
      : null,
  );
}

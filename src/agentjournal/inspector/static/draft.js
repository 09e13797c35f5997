// The reply being written. When the open session gets a user_message (or opens while a turn
// runs) and the server streams that turn (GET …/turns/{seq}/stream; 404 when it does not), the model's text shows live below
// the timeline, and gives way to the journaled assistant_message once the session's own stream
// brings it. The draft is never journaled: it is what the model has said so far.

import { apiKey, sessionPath, url } from "./api.js";
import { SseParser } from "./sse.js";

const RETRIES = 5; // reconnects after a dropped connection (Last-Event-ID: nothing is repeated)
const RETRY_MS = 1000;

export class Draft {
  constructor() {
    this.el = null; // made on first use, below the timeline
    this.controller = null; // the turn being followed
    this.text = ""; // deltas since the turn's last journal event
    this.pending = 0; // seq of the assistant_message the text became, once the turn says so
    this.journaled = 0; // newest assistant_message seq the session's stream has delivered
  }

  /** Each live event of the open session. */
  seen(sessionId, event) {
    if (event.type === "user_message") this.follow(sessionId, event.seq);
    if (event.type === "assistant_message") {
      this.journaled = Math.max(this.journaled, event.seq);
      this.render();
    }
  }

  /** The session was opened on `events`, its newest: a turn that is still running (its
   * user_message is the last one, with no reply after it) is followed from its start. */
  opened(sessionId, turnOpen, events) {
    if (!turnOpen) return;
    const turn = events.findLast((e) => e.type === "user_message");
    if (turn) this.follow(sessionId, turn.seq);
  }

  /** The session was closed: stop following and show nothing. */
  close() {
    this.controller?.abort();
    this.controller = null;
    Object.assign(this, { text: "", pending: 0, journaled: 0 });
    this.render();
  }

  async follow(sessionId, turn) {
    this.close();
    const controller = new AbortController();
    this.controller = controller;
    const path = url(sessionPath(sessionId, `/turns/${turn}/stream`));
    let lastId = "";
    for (let attempt = 0; attempt <= RETRIES; attempt += 1) {
      try {
        const headers = { Accept: "text/event-stream", ...apiKey.headers() };
        if (lastId) headers["Last-Event-ID"] = lastId;
        const response = await fetch(path, { headers, signal: controller.signal, cache: "no-store" });
        if (!response.ok || !response.body) return; // no stream of this turn here
        const parser = new SseParser();
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return; // the turn ended
          for (const frame of parser.push(value)) {
            if (frame.id) lastId = frame.id;
            if (this.controller === controller) this.take(frame);
          }
        }
      } catch {
        if (controller.signal.aborted) return;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  take(frame) {
    if (frame.type === "text_delta") {
      if (this.pending) Object.assign(this, { text: "", pending: 0 });
      this.text += JSON.parse(frame.data).text;
    } else if (frame.type === "assistant_message") {
      this.pending = JSON.parse(frame.data).seq; // shown until the session's stream has it
    } else if (frame.type !== "tool_call_delta") {
      Object.assign(this, { text: "", pending: 0 }); // a step journaled, a reset, an error
    }
    this.render();
  }

  render() {
    const settled = this.pending && this.pending <= this.journaled;
    const text = settled ? "" : this.text;
    if (!this.el) {
      if (!text) return;
      const timeline = document.getElementById("timeline");
      this.el = document.createElement("div");
      this.el.id = "draft";
      this.el.className = "draft";
      this.el.setAttribute("role", "status");
      this.el.setAttribute("aria-label", "The reply being written");
      // Styled here, so that the page's stylesheet needs nothing for it.
      this.el.style.cssText =
        "white-space:pre-wrap;margin:.5rem 0;padding:.5rem .75rem;border-left:3px dashed #888;opacity:.8";
      timeline.after(this.el);
    }
    this.el.hidden = !text;
    this.el.textContent = text;
  }
}

export const draft = new Draft();

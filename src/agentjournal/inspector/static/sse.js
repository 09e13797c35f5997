// Server-Sent Events over fetch. EventSource cannot send an Authorization header, and an API
// key must never travel in a URL, so the stream is read with fetch and parsed here.

/** Parses the text/event-stream format (WHATWG HTML, "Server-sent events") chunk by chunk. */
export class SseParser {
  constructor() {
    this.buffer = "";
    this.data = [];
    this.type = "";
    this.lastEventId = "";
    this.retry = null;
    this.comments = 0;
  }

  /** Feeds decoded text; returns the events it completed, as {type, data, id}. */
  push(text) {
    this.buffer += text;
    const events = [];
    let start = 0;
    for (;;) {
      const cr = this.buffer.indexOf("\r", start);
      const lf = this.buffer.indexOf("\n", start);
      if (cr < 0 && lf < 0) break;
      let end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      let next = end + 1;
      if (end === cr) {
        // A CR at the end of the chunk may be the first half of a CRLF: wait for more.
        if (cr === this.buffer.length - 1) break;
        if (this.buffer[cr + 1] === "\n") next += 1;
      }
      const event = this.line(this.buffer.slice(start, end));
      if (event) events.push(event);
      start = next;
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) {
      this.comments += 1; // a heartbeat
      return null;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.type = value;
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value;
    else if (field === "retry" && /^[0-9]+$/.test(value)) this.retry = Number(value);
    return null;
  }

  dispatch() {
    const data = this.data;
    const type = this.type || "message";
    this.data = [];
    this.type = "";
    if (data.length === 0) return null;
    return { type, data: data.join("\n"), id: this.lastEventId };
  }
}

/** Waits `ms`, or less if `signal` aborts; either way it leaves no listener behind. */
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });

/** An answer that may change if asked again: 408 Request Timeout, 429 Too Many Requests, 5xx. */
const transient = (status) => status === 408 || status === 429 || status >= 500;

/** The problem+json's title and detail, when the answer has them. */
async function problemOf(response) {
  try {
    const { title, detail } = await response.json();
    return { title, detail };
  } catch {
    return {}; // not problem+json: the status says enough
  }
}

/**
 * Follows an SSE endpoint until closed: reconnects sending `Last-Event-ID` with the last id
 * seen, so nothing is missed and nothing repeats. The first wait is the server's `retry:` delay
 * (`retryMs` until it sent one); each failure in a row doubles it, up to `maxRetryMs`; a
 * connection that opens starts again from the first wait.
 *
 * options: headers() -> the auth headers for each attempt; lastEventId; onEvent({type, data,
 * id}); onState(name, detail); onUnauthorized(). The states: "connecting"; "live";
 * "reconnecting" with {status (the HTTP answer, if any), error (no connection), delayMs (the
 * wait before the next attempt; absent during it)}; "closed" with {reason: "unauthorized" |
 * "gone" | "refused" (a 4xx that asking again will not change, with status, title, detail)},
 * or without detail when close() was called.
 * A stream that sends nothing, not even a heartbeat, for `idleMs` is dropped and reopened.
 */
export function followStream(url, options) {
  const controller = new AbortController();
  const { signal } = controller;
  const idleMs = options.idleMs ?? 45000;
  const maxRetryMs = options.maxRetryMs ?? 30000;
  let lastEventId = options.lastEventId ?? "";
  let retryMs = options.retryMs ?? 1000;
  let failures = 0; // in a row, since the last connection that opened
  const state = (name, detail) => options.onState?.(name, detail);

  async function readOnce() {
    const headers = { Accept: "text/event-stream", ...options.headers() };
    if (lastEventId !== "") headers["Last-Event-ID"] = lastEventId;
    const attempt = new AbortController();
    const abort = () => attempt.abort();
    signal.addEventListener("abort", abort, { once: true });
    let idle = setTimeout(abort, idleMs);
    try {
      const response = await fetch(url, { headers, signal: attempt.signal, cache: "no-store" });
      const { status } = response;
      if (status === 401) return { kind: "unauthorized" };
      if (status === 404) return { kind: "gone" };
      if (status >= 400 && !transient(status)) {
        return { kind: "refused", status, ...(await problemOf(response)) };
      }
      if (!response.ok || !response.body) return { kind: "retry", status };
      failures = 0;
      state("live");
      const parser = new SseParser();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return { kind: "retry" };
        clearTimeout(idle);
        idle = setTimeout(abort, idleMs);
        for (const event of parser.push(value)) {
          if (event.id !== "") lastEventId = event.id;
          options.onEvent(event);
        }
        if (parser.retry !== null) retryMs = parser.retry;
      }
    } catch (error) {
      if (signal.aborted) return { kind: "closed" };
      return { kind: "retry", error: String(error.message || error) };
    } finally {
      clearTimeout(idle);
      signal.removeEventListener("abort", abort);
    }
  }

  (async () => {
    state("connecting");
    while (!signal.aborted) {
      const outcome = await readOnce();
      if (signal.aborted) break;
      if (outcome.kind === "unauthorized") {
        state("closed", { reason: "unauthorized" });
        options.onUnauthorized?.();
        return;
      }
      if (outcome.kind === "gone") {
        state("closed", { reason: "gone" });
        return;
      }
      if (outcome.kind === "refused") {
        const { status, title, detail } = outcome;
        state("closed", { reason: "refused", status, title, detail });
        return;
      }
      const why = { status: outcome.status, error: outcome.error };
      const delayMs = Math.min(maxRetryMs, retryMs * 2 ** failures);
      failures += 1;
      state("reconnecting", { ...why, delayMs });
      await sleep(delayMs, signal);
      if (!signal.aborted) state("reconnecting", why);
    }
    state("closed");
  })();

  return {
    close: () => controller.abort(),
    get lastEventId() {
      return lastEventId;
    },
  };
}

// The sessions list: most recent activity first, filtered by status (asked of the API) and by a
// search over the loaded sessions' titles and ids (done here), one page at a time.

import { api, ApiError } from "./api.js";
import { formatDateTime, h, keyedList } from "./dom.js";

const PAGE_SIZE = 50;

export class SessionList {
  /** elements: {list, search, status, count, more}; onProblem(error) shows a failure. */
  constructor(elements, onProblem) {
    this.el = elements;
    this.onProblem = onProblem;
    this.sessions = [];
    this.nextCursor = null;
    this.openId = null;
    this.generation = 0; // a newer load wins over a slower older one
  }

  /** Loads the first page again (or, with `more`, the next one). True when it was loaded. */
  async load({ more = false } = {}) {
    const mine = ++this.generation;
    const query = { limit: PAGE_SIZE, status: this.el.status.value || undefined };
    if (more) query.cursor = this.nextCursor;
    try {
      const page = await api("v1/sessions", { query });
      if (mine !== this.generation) return false;
      this.sessions = more ? [...this.sessions, ...page.sessions] : page.sessions;
      this.nextCursor = page.next_cursor;
      this.render();
      return true;
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) this.onProblem(error);
      return false;
    }
  }

  clear() {
    this.sessions = [];
    this.nextCursor = null;
    this.render();
  }

  /** Marks the open session, and shows what its live events changed. */
  update(session) {
    this.openId = session?.session_id ?? null;
    const listed = session && this.sessions.find((s) => s.session_id === session.session_id);
    if (listed) {
      const { last_seq, title, status, updated_at } = session;
      Object.assign(listed, { last_seq, title, status, updated_at });
    }
    this.render();
  }

  render() {
    const search = this.el.search.value.trim().toLowerCase();
    const shown = this.sessions.filter(
      (s) =>
        !search ||
        s.title.toLowerCase().includes(search) ||
        s.session_id.toLowerCase().includes(search),
    );
    keyedList(
      this.el.list,
      shown,
      (s) => s.session_id,
      (s) => `${s.last_seq}|${s.title}|${s.status}|${s.session_id === this.openId}`,
      (s) => this.item(s),
    );
    const loaded = this.sessions.length;
    const more = this.nextCursor ? " (more to load)" : "";
    const count = search
      ? `${shown.length} of ${loaded} loaded sessions match${more}`
      : `${loaded} session${loaded === 1 ? "" : "s"}${more}`;
    // A live region speaks on every write, even of the same text: write only what changed.
    if (this.el.count.textContent !== count) this.el.count.textContent = count;
    this.el.more.hidden = !this.nextCursor;
  }

  item(s) {
    const link = h(
      "a",
      {
        href: `#/sessions/${encodeURIComponent(s.session_id)}`,
        "aria-current": s.session_id === this.openId ? "page" : null,
        class: "session-link",
      },
      h(
        "span",
        { class: "session-row" },
        h("span", { class: "session-name" }, s.title || "(untitled)"),
        s.status === "active" ? null : h("span", { class: `badge badge-${s.status}` }, s.status),
      ),
      h("span", { class: "session-meta" }, h("code", {}, s.session_id), ` · ${s.last_seq} events`),
      h("span", { class: "session-meta" }, `updated ${formatDateTime(s.updated_at)}`),
    );
    return h("li", {}, link);
  }
}

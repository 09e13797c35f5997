// The sessions list: most recent activity first, filtered by status and by a search of titles
// and ids, both asked of the API (so a session beyond the loaded pages is found too), one page
// at a time.

import { api, ApiError } from "./api.js";
import { formatDateTime, h, keyedList } from "./dom.js";

const PAGE_SIZE = 50;
const SEARCH_DELAY_MS = 200; // typing asks the API once it pauses this long, not on every key
const MAX_SEARCH = 200; // the API refuses longer searches (Journal.MAX_SEARCH), in code points

export class SessionList {
  /** elements: {list, search, status, count, more}; onProblem(error) shows a failure. */
  constructor(elements, onProblem) {
    this.el = elements;
    this.onProblem = onProblem;
    this.sessions = [];
    this.nextCursor = null;
    this.openId = null;
    this.openLive = null; // the open session as its live events left it
    // What `sessions` was loaded with: "Load more" continues that list, whatever the fields
    // hold now (a newer search or status reloads from the first page anyway).
    this.loaded = { status: undefined, search: "" };
    this.generation = 0; // a newer load wins over a slower older one
    this.inFlight = null; // {controller, more} of the newest load, until it settles
    this.searchTimer = null;
    this.el.search.addEventListener("input", () => this.searchSoon());
  }

  /** The search field as the API takes it: trimmed, at most MAX_SEARCH code points. */
  search() {
    return Array.from(this.el.search.value.trim()).slice(0, MAX_SEARCH).join("");
  }

  searchSoon() {
    clearTimeout(this.searchTimer);
    this.searchTimer = setTimeout(() => {
      this.searchTimer = null;
      this.load();
    }, SEARCH_DELAY_MS);
  }

  /** Loads the first page again (or, with `more`, the next one). True when it was loaded. */
  async load({ more = false } = {}) {
    if (more) {
      // The next page of a list that is about to be replaced would be mixed into the new one.
      if (this.searchTimer !== null || this.inFlight || !this.nextCursor) return false;
    } else {
      clearTimeout(this.searchTimer);
      this.searchTimer = null;
      this.inFlight?.controller.abort(); // its answer would be dropped anyway
    }
    const mine = ++this.generation;
    const controller = new AbortController();
    this.inFlight = { controller, more };
    const wanted = more
      ? this.loaded
      : { status: this.el.status.value || undefined, search: this.search() };
    const query = { limit: PAGE_SIZE, ...wanted };
    if (more) query.cursor = this.nextCursor;
    try {
      const page = await api("v1/sessions", { query, signal: controller.signal });
      if (mine !== this.generation) return false;
      this.sessions = more ? [...this.sessions, ...page.sessions] : page.sessions;
      this.applyLive();
      this.nextCursor = page.next_cursor;
      this.loaded = wanted;
      this.render();
      return true;
    } catch (error) {
      // A stale load's failure (an abort among them) is not the list's problem any more.
      if (mine !== this.generation) return false;
      if (!(error instanceof ApiError && error.status === 401)) this.onProblem(error);
      return false;
    } finally {
      if (mine === this.generation) this.inFlight = null;
    }
  }

  clear() {
    clearTimeout(this.searchTimer);
    this.searchTimer = null;
    this.inFlight?.controller.abort();
    this.inFlight = null;
    this.generation += 1;
    this.sessions = [];
    this.nextCursor = null;
    this.loaded = { status: undefined, search: "" };
    this.render();
  }

  /** Marks the open session, and shows what its live events changed. */
  update(session) {
    this.openId = session?.session_id ?? null;
    this.openLive = session ? { ...session } : null;
    this.applyLive();
    this.render();
  }

  /** Shows the open session as its live events left it. A list page the API answered before
   * the newest of those events committed holds an older row, and must not undo them. */
  applyLive() {
    const live = this.openLive;
    const listed = live && this.sessions.find((s) => s.session_id === live.session_id);
    if (!listed || listed.last_seq > live.last_seq) return;
    // A rename that no longer matches the search stays listed until the next load.
    const { last_seq, title, status, updated_at } = live;
    Object.assign(listed, { last_seq, title, status, updated_at });
  }

  /** Shows what was loaded; the search field's text counts only once the API has answered. */
  render() {
    keyedList(
      this.el.list,
      this.sessions,
      (s) => s.session_id,
      (s) => `${s.last_seq}|${s.title}|${s.status}|${s.session_id === this.openId}`,
      (s) => this.item(s),
    );
    const loaded = this.sessions.length;
    const plural = loaded === 1 ? "" : "s";
    const more = this.nextCursor ? " (more to load)" : "";
    const count = this.loaded.search
      ? `${loaded} matching session${plural}${more}`
      : `${loaded} session${plural}${more}`;
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

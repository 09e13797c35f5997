// The sessions list: most recent activity first, filtered by status and by a search of titles
// and ids, both asked of the API (so a session beyond the loaded pages is found too), one page
// at a time. It is live: the tenant's feed moves a session with new events to the top, and a
// new session brings a reload of the first page, at most once a second.

import { api, ApiError, apiKey, notifyUnauthorized, url } from "./api.js";
import { formatDateTime, h, keyedList } from "./dom.js";
import { followStream } from "./sse.js";

const PAGE_SIZE = 50;
const FEED_DELAY_MS = 1000; // the feed's news is shown in batches, at most one a second
const MAX_KNOWN = 1000; // sessions whose newest state the feed told us, kept for stale pages
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
    // What `sessions` was loaded with: "Load more" continues that list, whatever the fields
    // hold now (a newer search or status reloads from the first page anyway).
    this.loaded = { status: undefined, search: "" };
    this.generation = 0; // a newer load wins over a slower older one
    this.inFlight = null; // {controller, more} of the newest load, until it settles
    this.searchTimer = null;
    this.feed = null; // the feed's stream, once following
    this.news = new Map(); // session_id -> its newest event, not shown yet
    this.newsTimer = null;
    this.lastNews = 0; // when news was last shown (ms)
    this.unknown = false; // the news names a session the list does not have
    // session_id -> {last_seq, title, status, updated_at} as the newest event showed them: a
    // page asked for before that event must not bring the older state back.
    this.known = new Map();
    this.el.search.addEventListener("input", () => this.searchSoon());
  }

  /** Follows the tenant's feed from its newest event on (idempotent). */
  async follow() {
    if (this.feed) return;
    this.feed = { close() {} }; // taken: a second call waits for nothing
    let head;
    try {
      head = (await api("v1/events/head")).position;
    } catch (error) {
      this.feed = null;
      if (!(error instanceof ApiError && error.status === 401)) this.onProblem(error);
      return;
    }
    if (!this.feed) return; // cleared meanwhile
    const stream = followStream(url("v1/events/stream"), {
      headers: () => apiKey.headers(),
      lastEventId: head ?? "",
      onEvent: (frame) => this.feed === stream && this.receive(frame),
      // Stopped for good (a key refused, say): the next successful load follows again.
      onState: (state) => state === "closed" && this.feed === stream && (this.feed = null),
      onUnauthorized: notifyUnauthorized,
    });
    this.feed = stream;
  }

  receive(frame) {
    let event;
    try {
      event = JSON.parse(frame.data);
    } catch {
      return; // not an event frame
    }
    if (typeof event.session_id !== "string") return;
    const seen = this.news.get(event.session_id);
    const merged = { ...(seen?.payload ?? {}) };
    if (event.type === "session_updated") Object.assign(merged, event.payload);
    if (event.type === "session_created") Object.assign(merged, event.payload, { created: true });
    this.news.delete(event.session_id); // re-set: the Map's order is the order of activity
    this.news.set(event.session_id, { seq: event.seq, at: event.created_at, payload: merged });
    if (this.newsTimer === null) {
      const wait = Math.max(0, this.lastNews + FEED_DELAY_MS - Date.now());
      this.newsTimer = setTimeout(() => this.showNews(), wait);
    }
  }

  /** Shows the feed's news: sessions with new events move to the top. */
  showNews() {
    this.newsTimer = null;
    this.lastNews = Date.now();
    const news = [...this.news].reverse(); // newest activity first
    this.news.clear();
    const moved = [];
    for (const [id, { seq, at, payload }] of news) {
      const state = { last_seq: seq, updated_at: at };
      if ("title" in payload) state.title = payload.title;
      if ("status" in payload) state.status = payload.status;
      this.remember(id, state);
      const listed = this.sessions.find((s) => s.session_id === id);
      if (listed) {
        Object.assign(listed, state);
        if (this.matchesStatus(listed.status)) moved.push(listed);
      } else if (this.matchesStatus(state.status ?? "active")) {
        this.unknown = true;
      }
    }
    const movedIds = new Set(moved.map((s) => s.session_id));
    const rest = this.sessions.filter(
      (s) => !movedIds.has(s.session_id) && this.matchesStatus(s.status),
    );
    this.sessions = [...moved, ...rest];
    this.render();
    // A session the list does not have (a new one, or one beyond the loaded pages): the first
    // page again, unless the user's own load is on its way (it will have it).
    if (this.unknown && !this.inFlight && this.searchTimer === null) {
      this.unknown = false;
      this.load({ merge: true });
    }
  }

  /** Whether a session of `status` belongs in the list under the status loaded. */
  matchesStatus(status) {
    const wanted = this.loaded.status;
    if (wanted === undefined) return status !== "deleted";
    return wanted === "all" || wanted === status;
  }

  remember(id, state) {
    const before = this.known.get(id) ?? {};
    this.known.delete(id);
    this.known.set(id, { ...before, ...state });
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value);
  }

  /** The session as the page knows it best: the feed's newer state wins over an older page. */
  freshest(s) {
    const known = this.known.get(s.session_id);
    return known && known.last_seq > s.last_seq ? { ...s, ...known } : s;
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

  /** Loads the first page again (or, with `more`, the next one; with `merge`, the first page
   * in front of the sessions already loaded, for the feed's news). True when it was loaded. */
  async load({ more = false, merge = false } = {}) {
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
    const wanted = more || merge
      ? this.loaded
      : { status: this.el.status.value || undefined, search: this.search() };
    const query = { limit: PAGE_SIZE, ...wanted };
    if (more) query.cursor = this.nextCursor;
    try {
      const page = await api("v1/sessions", { query, signal: controller.signal });
      if (mine !== this.generation) return false;
      const found = page.sessions.map((s) => this.freshest(s));
      if (merge && this.sessions.length > PAGE_SIZE) {
        // More pages were loaded: keep them (and their cursor) behind the new first page.
        const ids = new Set(found.map((s) => s.session_id));
        this.sessions = [...found, ...this.sessions.filter((s) => !ids.has(s.session_id))];
      } else {
        this.sessions = more ? [...this.sessions, ...found] : found;
        this.nextCursor = page.next_cursor;
      }
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
    this.feed?.close();
    this.feed = null;
    clearTimeout(this.newsTimer);
    this.newsTimer = null;
    this.news.clear();
    this.known.clear();
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
    const listed = session && this.sessions.find((s) => s.session_id === session.session_id);
    if (session) {
      const { last_seq, title, status, updated_at } = session;
      this.remember(session.session_id, { last_seq, title, status, updated_at });
      // A rename that no longer matches the search stays listed until the next load.
      if (listed) Object.assign(listed, { last_seq, title, status, updated_at });
    }
    this.render();
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
      s.source_id
        ? h("span", { class: "session-meta session-source" }, "from ", h("code", {}, s.source_id))
        : null,
      h("span", { class: "session-meta" }, `updated ${formatDateTime(s.updated_at)}`),
    );
    return h("li", {}, link);
  }
}

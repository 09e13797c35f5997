// Full-text search across every session of the tenant (GET /v1/search): a box in the top bar,
// a list of hits under it (session title, seq, type, time, a snippet with the matched words
// marked), and a click on a hit opens the session at that event (#/sessions/{id}/seq/{n}).
// Imported by inspector.js; it only changes the address, which the inspector follows.

import { api, ApiError } from "./api.js";
import { formatDateTime, h } from "./dom.js";

const PAGE_SIZE = 20;
const SEARCH_DELAY_MS = 250; // typing asks the API once it pauses this long
const MAX_QUERY = 500; // the API refuses longer queries, in code points

const $ = (id) => document.getElementById(id);

/** `snippet` with each [start, end) of `highlights` (code points) in a <mark>. */
export function markedSnippet(snippet, highlights) {
  const chars = Array.from(snippet); // offsets count code points, as the API gives them
  const parts = [];
  let last = 0;
  for (const [start, end] of highlights) {
    if (start < last || end > chars.length) continue;
    parts.push(chars.slice(last, start).join(""), h("mark", {}, chars.slice(start, end).join("")));
    last = end;
  }
  parts.push(chars.slice(last).join(""));
  return parts;
}

class SearchBox {
  constructor() {
    this.form = $("search-form");
    this.input = $("search-query");
    this.panel = $("search-results");
    this.list = $("search-hits");
    this.status = $("search-status");
    this.more = $("search-more");
    this.hits = [];
    this.cursor = null;
    this.query = "";
    this.generation = 0;
    this.timer = null;
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.run();
    });
    this.input.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), SEARCH_DELAY_MS);
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.close();
    });
    this.more.addEventListener("click", () => this.run({ more: true }));
    $("search-close").addEventListener("click", () => this.close());
  }

  close() {
    clearTimeout(this.timer);
    this.generation += 1;
    this.panel.hidden = true;
  }

  async run({ more = false } = {}) {
    clearTimeout(this.timer);
    const query = more ? this.query : Array.from(this.input.value.trim()).slice(0, MAX_QUERY).join("");
    if (!query) {
      this.close();
      return;
    }
    const mine = ++this.generation;
    this.panel.hidden = false;
    this.status.textContent = "Searching…";
    try {
      const page = await api("v1/search", {
        query: { q: query, limit: PAGE_SIZE, cursor: more ? this.cursor : undefined },
      });
      if (mine !== this.generation) return;
      this.query = query;
      this.hits = more ? [...this.hits, ...page.hits] : page.hits;
      this.cursor = page.next_cursor;
      this.render();
    } catch (error) {
      if (mine !== this.generation) return;
      this.hits = [];
      this.cursor = null;
      this.list.replaceChildren();
      this.more.hidden = true;
      if (error instanceof ApiError && error.status === 401) {
        this.panel.hidden = true;
        return;
      }
      this.status.textContent =
        error instanceof ApiError ? error.detail || error.title || `Error ${error.status}` : String(error);
    }
  }

  render() {
    const count = this.hits.length;
    this.status.textContent =
      count === 0
        ? `No event holds every word of “${this.query}”.`
        : `${count}${this.cursor ? "+" : ""} event${count === 1 ? "" : "s"} for “${this.query}”`;
    this.list.replaceChildren(...this.hits.map((hit) => this.item(hit)));
    this.more.hidden = !this.cursor;
  }

  item(hit) {
    const target = `#/sessions/${encodeURIComponent(hit.session_id)}/seq/${hit.seq}`;
    return h(
      "li",
      { class: "search-hit" },
      h(
        "a",
        {
          href: target,
          onclick: () => {
            this.panel.hidden = true;
          },
        },
        h(
          "span",
          { class: "search-hit-head" },
          h("strong", { class: "search-hit-title" }, hit.session_title || hit.session_id),
          h("span", { class: "muted small" }, ` #${hit.seq} · ${hit.type} · ${formatDateTime(hit.created_at)}`),
          hit.source_id
            ? h("span", { class: "muted small search-hit-source" }, " · from ", h("code", {}, hit.source_id))
            : null,
        ),
        h("span", { class: "search-hit-snippet" }, markedSnippet(hit.snippet, hit.highlights)),
      ),
    );
  }
}

/** Wires the search box in the top bar (once, at start-up). */
export function startSearch() {
  return new SearchBox();
}

// One session's events as a window of consecutive seqs, however long the session: opened at the
// newest events, or around a seq; grown a page at a time, older or newer, as the user scrolls;
// trimmed at the far end so the page never holds more than MAX_EVENTS events (the timeline's
// items, its DOM and the heap stay bounded). Seqs have no gaps, so an event is found by index.

import { api, sessionPath } from "./api.js";

export const PAGE = 200; // events per request
export const MAX_EVENTS = 600; // events kept: at most this many timeline items

export class EventWindow {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.events = [];
    this.last = 0; // the session's newest seq, as far as the page knows
    this.replaced = 0; // counts replace(): a page asked for before one is stale
  }

  get first() {
    return this.events[0]?.seq ?? 0;
  }

  get newest() {
    return this.events.at(-1)?.seq ?? 0;
  }

  /** No older event to load: the window starts at the session's first event. */
  get atStart() {
    return this.events.length === 0 || this.first <= 1;
  }

  /** No newer event to load: the window ends at the session's newest event. */
  get atEnd() {
    return this.newest >= this.last;
  }

  has(seq) {
    return this.events.length > 0 && seq >= this.first && seq <= this.newest;
  }

  event(seq) {
    return this.has(seq) ? this.events[seq - this.first] : undefined;
  }

  page(query) {
    return api(sessionPath(this.sessionId, "/events"), { query });
  }

  /** The newest page: where a session opens. */
  async openNewest() {
    this.replace((await this.page({ last: PAGE })).events);
  }

  /** A page centred on `seq`: where a search hit or a time-travel point opens. */
  async openAround(seq) {
    this.replace((await this.page({ around: seq, limit: PAGE })).events);
  }

  replace(events) {
    this.replaced += 1;
    this.events = events;
    this.last = Math.max(this.last, this.newest);
  }

  /** Loads the page before the window, dropping the newest events beyond MAX_EVENTS. */
  async older() {
    if (this.atStart) return false;
    const [first, replaced] = [this.first, this.replaced];
    const { events } = await this.page({ before: first, last: PAGE });
    if (this.replaced !== replaced) return false; // the window was replaced meanwhile: stale
    this.events = [...events, ...this.events].slice(0, MAX_EVENTS);
    return events.length > 0;
  }

  /** Loads the page after the window, dropping the oldest events beyond MAX_EVENTS. */
  async newer() {
    if (this.atEnd) return false;
    const newest = this.newest;
    const replaced = this.replaced;
    const { events } = await this.page({ after: newest, limit: PAGE });
    if (this.replaced !== replaced) return false; // the window was replaced meanwhile: stale
    // Live events may have been added meanwhile: keep each seq once.
    const fresh = events.filter((e) => e.seq > this.newest);
    if (events.length === 0) this.last = newest; // nothing after all
    this.events = [...this.events, ...fresh].slice(-MAX_EVENTS);
    return fresh.length > 0;
  }

  /**
   * A live event. Added when the window ends at the newest event; then, if the window is full,
   * its oldest event is dropped when `dropOldest` (the user is at the bottom), else the new
   * event stays unloaded until the user scrolls down to it. True when it was added.
   */
  push(event, dropOldest) {
    const atEnd = this.atEnd;
    this.last = Math.max(this.last, event.seq);
    if (!atEnd || event.seq !== this.newest + 1) return false;
    if (this.events.length >= MAX_EVENTS && !dropOldest) return false;
    this.events.push(event);
    if (this.events.length > MAX_EVENTS) this.events.shift();
    return true;
  }
}

/**
 * The first item of `list` on screen and where it is, to put it back there after a render.
 * Preferably not an assistant turn or a lone tool result: when older events load, those near the
 * window's start may merge into a turn that starts earlier, where the other items stay as built.
 */
export function scrollAnchor(list) {
  const items = [...list.children];
  const onScreen = items.filter((item) => {
    const { top, bottom } = item.getBoundingClientRect();
    return bottom > 0 && top < window.innerHeight;
  });
  const MERGING = ["assistant_turn", "tool_result"];
  const stable = onScreen.find((li) => li !== items[0] && !MERGING.includes(li.dataset.type));
  const item = stable ?? onScreen.find((li) => li !== items[0]) ?? onScreen[0];
  return item ? { item, seq: Number(item.dataset.seq), top: item.getBoundingClientRect().top } : null;
}

/**
 * Scrolls so that the anchor's item (or, if it was rebuilt, the first item from its seq on) is
 * where it was: older events loaded above it, or events dropped above it, do not move the view.
 */
export function restoreAnchor(list, anchor) {
  if (!anchor) return;
  let item = anchor.item.isConnected ? anchor.item : null;
  if (!item) {
    item = [...list.children].find((li) => Number(li.dataset.seq) >= anchor.seq) ?? null;
  }
  if (item) window.scrollBy(0, item.getBoundingClientRect().top - anchor.top);
}

/** The timeline item that shows `seq` (an assistant turn shows several events). */
export function itemOf(list, seq) {
  const items = [...list.children];
  const exact = list.querySelector(`[data-seq="${seq}"]`);
  if (exact) return exact.closest("#timeline > li");
  let found = null;
  for (const item of items) {
    if (Number(item.dataset.seq) <= seq) found = item;
    else break;
  }
  return found;
}

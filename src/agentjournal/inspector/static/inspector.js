// The inspector page: the sessions list, one session's timeline followed live over SSE, a
// time-travel slider, "Fork here", and the API key form. It uses only the public /v1 API. A
// session of any length opens at its newest events and is read a window at a time (timeline.js).

import {
  all,
  api,
  ApiError,
  apiKey,
  notifyUnauthorized,
  onUnauthorized,
  sessionPath,
  url,
} from "./api.js";
import { draft } from "./draft.js";
import { describe, Fold } from "./fold.js";
import { formatDateTime, h, keyedList } from "./dom.js";
import { renderItem, renderTask } from "./render.js";
import { SessionList } from "./sessions.js";
import { followStream } from "./sse.js";
import { startSearch } from "./search.js"; // the search box: it opens hits by the address
import { EventWindow, itemOf, PAGE, restoreAnchor, scrollAnchor } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const TASK_PAGE = 1000;
const TRAVEL_DELAY_MS = 100;

const sessions = new SessionList(
  {
    list: $("session-list"),
    search: $("session-search"),
    status: $("session-status"),
    count: $("session-count"),
    more: $("load-more"),
  },
  showProblem,
);
let current = null; // the open session: see openSession()
let generation = 0; // bumped whenever another session is opened, so late answers are dropped

// ---- views and messages ------------------------------------------------------------------

function showView(name) {
  for (const view of ["auth", "welcome", "session"]) $(`${view}-view`).hidden = view !== name;
}

function showProblem(error) {
  const box = $("problem");
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  const title = error instanceof ApiError ? error.title || `Error ${error.status}` : "Error";
  const detail = error instanceof ApiError ? error.detail : String(error.message || error);
  box.replaceChildren(h("strong", {}, title), detail ? ` ${detail}` : "");
  box.hidden = false;
}

let announcement = { count: 0, last: "", timer: null };

/** Tells screen readers about live events, a few at a time rather than one by one. */
function announce(text) {
  announcement.count += 1;
  announcement.last = text;
  if (announcement.timer) return;
  announcement.timer = setTimeout(() => {
    const { count, last } = announcement;
    $("announcer").textContent = count === 1 ? last : `${count} new events`;
    announcement = { count: 0, last: "", timer: null };
  }, 600);
}

/** Drops a batch not yet announced: it would speak of a session no longer shown. */
function dropAnnouncement() {
  clearTimeout(announcement.timer);
  announcement = { count: 0, last: "", timer: null };
}

// ---- authentication ----------------------------------------------------------------------

function askForKey() {
  const hadKey = apiKey.get() !== null;
  apiKey.clear();
  closeSession();
  $("forget-key").hidden = true;
  $("auth-error").textContent = hadKey ? "The server did not accept that key." : "";
  if (!$("auth-view").hidden) return;
  showProblem(null);
  showView("auth");
  $("api-key").value = "";
  $("api-key").focus();
}

async function useKey(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  apiKey.set(key);
  try {
    await api("v1/sessions", { query: { limit: 1 } });
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401))
      $("auth-error").textContent = error.message;
    return;
  }
  $("auth-error").textContent = "";
  $("api-key").value = "";
  showView("welcome");
  // The key's field is hidden now: without this the focus would fall back to <body>.
  $("session-search").focus();
  await loadSessions();
  route();
}

function forgetKey() {
  apiKey.clear();
  sessions.clear();
  askForKey();
}

async function loadSessions(options) {
  if (!(await sessions.load(options))) return;
  $("forget-key").hidden = apiKey.get() === null;
  sessions.follow(); // the list stays live from now on
}

// ---- one session -------------------------------------------------------------------------

function closeSession() {
  generation += 1;
  clearTimeout(current?.travelTimer);
  current?.stream?.close();
  draft.close();
  current = null;
  dropAnnouncement();
  // Item keys are seqs, the same in every session: another session's elements must not be reused.
  for (const id of ["timeline", "tasks", "session-facts"]) {
    $(id).keyedCache = null;
    $(id).replaceChildren();
  }
}

function sessionLink(id) {
  return h("a", { href: `#/sessions/${encodeURIComponent(id)}` }, id);
}

/** Opens a session at its newest events, or (`at`, a seq) around that event. */
async function openSession(id, at = null) {
  closeSession();
  const mine = generation;
  showProblem(null);
  showView("session");
  $("session-title").textContent = "Loading…";
  for (const control of ["travel", "travel-live", "fork"]) $(control).disabled = true;
  $("live-state").textContent = "";
  const window_ = new EventWindow(id);
  let session, tasks;
  try {
    // At once: the events page does not need the session's row.
    [session] = await Promise.all([
      api(sessionPath(id)),
      at === null ? window_.openNewest() : window_.openAround(at),
    ]);
    window_.last = Math.max(window_.last, session.last_seq);
    // After the events: a task created meanwhile is then in this list or in the stream.
    tasks = await all(
      "v1/tasks",
      { session_id: id, limit: TASK_PAGE },
      (p) => p.tasks,
      (p) => p.next_after,
      "after",
    );
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof ApiError && error.status === 401) return;
    showView("welcome");
    showProblem(error);
    return;
  }
  if (mine !== generation) return;
  const last = window_.last;
  const taskIds = new Set(tasks.map((t) => t.task_id));
  const isTask = (taskId) => taskIds.has(taskId);
  // The tasks as they are now, kept current by live events: what the panel shows when the
  // window does not start at the first event (so the fold cannot know them).
  const liveTasks = new Fold(isTask);
  for (const task of tasks) liveTasks.taskMap.set(task.task_id, { ...task, updated_seq: 0 });
  current = {
    id,
    session,
    window: window_,
    last,
    upto: last,
    following: true,
    taskIds,
    isTask,
    liveTasks,
    fold: Fold.of(window_.events, last, isTask), // the window's events up to `upto`
    open: new Set(),
    forking: false, // a fork of this session is being made: its button waits
    loading: false, // a page of older or newer events is being loaded
    stream: null,
  };
  sessions.update(session);
  renderSession();
  $("session-title").focus({ preventScroll: true });
  if (at === null) scrollToBottom();
  else showSeq(at);
  current.stream = followStream(url(sessionPath(id, "/events/stream")), {
    headers: () => apiKey.headers(),
    lastEventId: String(last),
    onEvent: (frame) => mine === generation && receive(frame),
    onState: (state, detail) => mine === generation && showLiveState(state, detail),
    onUnauthorized: notifyUnauthorized,
  });
  if (at === null) draft.opened(id, session.turn_open, window_.events);
  checkEdges();
}

function scrollToBottom() {
  window.scrollTo({ top: document.documentElement.scrollHeight });
}

/** Scrolls the item showing `seq` to the middle of the view and marks it as the target. */
function showSeq(seq) {
  const list = $("timeline");
  for (const old of list.querySelectorAll(".target")) old.classList.remove("target");
  const item = itemOf(list, seq);
  if (!item) return;
  item.classList.add("target");
  item.scrollIntoView({ block: "center" });
}

/** Opens the window around `seq` in the open session (a search hit, the slider far away). */
async function jumpTo(seq) {
  if (!current) return;
  const mine = generation;
  const shown = current;
  const ticket = (shown.jump = (shown.jump ?? 0) + 1); // the newest jump wins
  shown.loading = true;
  try {
    if (seq >= shown.last - PAGE) await shown.window.openNewest();
    else await shown.window.openAround(seq);
  } catch (error) {
    if (mine === generation && !(error instanceof ApiError && error.status === 401))
      showProblem(error);
    return false;
  } finally {
    shown.loading = false;
  }
  if (mine !== generation || ticket !== shown.jump) return false;
  refold();
  renderSession();
  return true;
}

let edgeCheck = false;

/** Loads older (or newer) events when the top (or bottom) of the window comes near the view. */
function checkEdges() {
  if (edgeCheck) return;
  edgeCheck = true;
  requestAnimationFrame(async () => {
    edgeCheck = false;
    if (!current || current.loading) return;
    const shown = current;
    const margin = window.innerHeight * 1.5;
    const top = $("timeline").getBoundingClientRect().top;
    const bottom = $("timeline").getBoundingClientRect().bottom;
    const { window: events } = shown;
    let load = null;
    if (!events.atStart && top > -margin) load = () => events.older();
    else if (!events.atEnd && shown.upto > events.newest && bottom < window.innerHeight + margin)
      load = () => events.newer();
    if (!load) return;
    shown.loading = true;
    const mine = generation;
    let grew = false;
    try {
      grew = await load();
    } catch (error) {
      if (mine === generation && !(error instanceof ApiError && error.status === 401))
        showProblem(error);
    } finally {
      shown.loading = false;
    }
    if (mine !== generation || !grew) return;
    const anchor = scrollAnchor($("timeline"));
    refold();
    renderSession();
    restoreAnchor($("timeline"), anchor);
    checkEdges(); // the page loaded may not fill the view yet
  });
}

/** Folds the window's events up to `upto` afresh (after the window or the point changed). */
function refold() {
  current.fold = Fold.of(current.window.events, current.upto, current.isTask);
}

/** The stream's state in words; `detail` is sse.js's (why it waits or stopped). */
function liveStateText(state, detail = {}) {
  if (state === "connecting") return "Connecting…";
  if (state === "live") return "Live";
  if (state === "reconnecting") {
    const why = detail.status ? ` (HTTP ${detail.status})` : detail.error ? " (no connection)" : "";
    if (detail.delayMs === undefined) return `Reconnecting…${why}`;
    return `Reconnecting in ${Math.ceil(detail.delayMs / 1000)} s…${why}`;
  }
  if (detail.reason === "gone") return "Stream closed: the session is gone";
  if (detail.status) {
    const problem = detail.detail || detail.title;
    return `Stopped following (HTTP ${detail.status})${problem ? `: ${problem}` : ""}`;
  }
  return "Not following";
}

function showLiveState(state, detail) {
  const el = $("live-state");
  el.textContent = liveStateText(state, detail);
  el.dataset.state = state;
}

function receive(frame) {
  let event;
  try {
    event = JSON.parse(frame.data);
  } catch {
    return; // not an event frame
  }
  if (!current || typeof event.seq !== "number" || event.seq <= current.last) return;
  const nearBottom =
    window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
  const anchor = scrollAnchor($("timeline"));
  const added = current.window.push(event, nearBottom && current.following);
  draft.seen(current.id, event);
  current.last = event.seq;
  const session = current.session;
  session.last_seq = event.seq;
  session.event_count += 1;
  session.updated_at = event.created_at;
  if (event.type === "session_updated") Object.assign(session, event.payload);
  // A fork's copied task events made no tasks; anything created after the fork point did.
  if (event.type === "task_created" && event.seq > (session.forked_at_seq ?? 0)) {
    current.taskIds.add(event.payload.task_id);
  }
  if (event.type.startsWith("task_")) current.liveTasks.pushTask(event);
  if (current.following) {
    current.upto = event.seq;
    // At live, the one new event is folded in: no refold of the window per event (unless the
    // window dropped its oldest event to stay bounded).
    if (added && current.window.first === current.fold.first) current.fold.push(event);
    else refold();
  }
  sessions.update(session);
  const fresh = renderSession();
  for (const node of fresh) node.classList.add("fresh");
  announce(`New ${describe(event)} (event ${event.seq})`);
  if (current.following && nearBottom) scrollToBottom();
  else restoreAnchor($("timeline"), anchor);
}

/** One fact: [name, text, value()], where value() builds richer content than the text. */
function fact([name, text, value]) {
  return h("div", {}, h("dt", {}, name), h("dd", {}, value ? value() : text));
}

function renderFacts(session, last) {
  const { forked_from: from, forked_at_seq: at } = session;
  const facts = [
    ["Session", session.session_id, () => h("code", {}, session.session_id)],
    ["Status", session.status],
    session.model ? ["Model", session.model] : null,
    ["Events", String(last)],
    session.prompt_tokens || session.completion_tokens
      ? ["Tokens", `${session.prompt_tokens} in · ${session.completion_tokens} out`]
      : null,
    from ? ["Forked from", `${from} at #${at}`, () => [sessionLink(from), ` at #${at}`]] : null,
    session.source_id
      ? ["Replicated from", session.source_id, () => h("code", {}, session.source_id)]
      : null,
    ["Created", formatDateTime(session.created_at)],
  ];
  // Keyed, so that a live event replaces only the facts it changed (a focused link stays).
  keyedList($("session-facts"), facts.filter(Boolean), ([name]) => name, ([, text]) => text, fact);
}

function renderSession() {
  const { session, window: events, last, upto, following } = current;
  $("session-title").textContent = session.title || "(untitled)";
  renderFacts(session, last);

  const slider = $("travel");
  slider.max = String(Math.max(1, last));
  slider.value = String(Math.max(1, upto));
  slider.disabled = last <= 1;
  const where = `event ${upto} of ${last}`;
  slider.setAttribute("aria-valuetext", `${where}: ${describe(events.event(upto))}`);
  $("travel-output").textContent = following ? `${where} · live` : where;
  // A disabled button loses the focus to <body>: hand it to the slider, which did the same.
  if (following && document.activeElement === $("travel-live")) slider.focus();
  $("travel-live").disabled = following;
  $("fork").disabled = current.forking;

  const ctx = { open: current.open, travelTo, sessionLink };
  const fresh = keyedList(
    $("timeline"),
    current.fold.items,
    (i) => i.key,
    (i) => i.events.length,
    (i) => renderItem(ctx, i),
  );
  const hidden = last - upto;
  const unloaded = Math.min(upto, last) - events.newest;
  $("timeline-end").textContent = hidden
    ? `${hidden} later event${hidden === 1 ? "" : "s"} hidden: move the slider or press “Back to live”.`
    : unloaded > 0
      ? `${unloaded} newer event${unloaded === 1 ? "" : "s"} below: scroll down to load them.`
      : "";
  $("timeline-start").textContent = events.atStart
    ? ""
    : `${events.first - 1} earlier event${events.first === 2 ? "" : "s"}: scroll up to load them.`;

  // The fold knows the tasks only when the window starts at the first event; else the panel
  // shows them as they are now (those created by `upto`).
  const exact = events.atStart;
  const tasks = exact
    ? current.fold.tasks()
    : current.liveTasks.tasks().filter((t) => t.created_seq <= upto);
  $("tasks-heading").textContent = following
    ? "Tasks"
    : exact
      ? `Tasks as of event ${upto}`
      : `Tasks created by event ${upto} (as they are now)`;
  if (tasks.length === 0) {
    $("tasks").keyedCache = null;
    $("tasks").replaceChildren(h("li", { class: "muted" }, "No tasks in this session."));
  } else {
    if (!$("tasks").keyedCache) $("tasks").replaceChildren();
    keyedList(
      $("tasks"),
      tasks,
      (t) => t.task_id,
      (t) => t.updated_seq,
      (t) => renderTask(ctx, t),
    );
  }
  return fresh;
}

/** Shows the session as of `seq`; a point outside the loaded window loads the events around it
 * (once the slider rests for TRAVEL_DELAY_MS: dragging it across a long session asks once). */
function travelTo(seq) {
  if (!current) return;
  const shown = current;
  shown.upto = Math.max(1, Math.min(seq, shown.last));
  shown.following = shown.upto === shown.last;
  clearTimeout(shown.travelTimer);
  if (shown.window.has(shown.upto) || (shown.following && shown.window.atEnd)) {
    shown.jump = (shown.jump ?? 0) + 1; // a load on its way for an earlier point is stale now
    refold();
    renderSession();
    return;
  }
  renderTravel(); // the slider and its words follow at once; the timeline once loaded
  shown.travelTimer = setTimeout(async () => {
    if ((await jumpTo(shown.upto)) && current === shown) {
      if (shown.following) scrollToBottom();
      else showSeq(shown.upto);
    }
  }, TRAVEL_DELAY_MS);
}

/** The time-travel controls alone, while the window around the point loads. */
function renderTravel() {
  const { last, upto, following } = current;
  $("travel").value = String(Math.max(1, upto));
  $("travel-output").textContent = following
    ? `event ${upto} of ${last} · live`
    : `event ${upto} of ${last}`;
  $("travel-live").disabled = following;
}

async function forkHere() {
  if (!current || current.forking) return;
  const mine = generation;
  const forked = current; // the session being forked: another may be open when the fork answers
  const { id, upto } = forked;
  forked.forking = true;
  $("fork").disabled = true;
  try {
    const fork = await api(sessionPath(id, "/fork"), { method: "POST", body: { at_seq: upto } });
    await loadSessions(); // the list shows the fork, whichever session is open by now
    // Opened another session meanwhile: the user went there, so the page stays there.
    if (mine !== generation) return;
    location.hash = `#/sessions/${encodeURIComponent(fork.session_id)}`;
    // Now, not batched: opening the fork drops the batch of the session it leaves.
    dropAnnouncement();
    $("announcer").textContent = `Forked at event ${upto} into ${fork.title || fork.session_id}`;
  } catch (error) {
    if (mine !== generation) return;
    if (!(error instanceof ApiError && error.status === 401)) showProblem(error);
  } finally {
    forked.forking = false;
    if (current === forked) $("fork").disabled = false;
  }
}

// ---- routing and start-up ----------------------------------------------------------------

function route() {
  if (!$("auth-view").hidden) return;
  // #/sessions/{id}, or #/sessions/{id}/seq/{n}: the session opened around event n.
  const match = /^#\/sessions\/([^/]+)(?:\/seq\/([0-9]+))?$/.exec(location.hash);
  if (match) {
    const id = decodeURIComponent(match[1]);
    const at = match[2] === undefined ? null : Math.max(1, Number(match[2]));
    if (at !== null && current?.id === id) {
      // Positioned at the event, back at live: not a time travel to it.
      clearTimeout(current.travelTimer);
      current.upto = current.last;
      current.following = true;
      jumpTo(at).then((jumped) => jumped && showSeq(at));
      return;
    }
    openSession(id, at);
    return;
  }
  closeSession();
  sessions.update(null);
  showView("welcome");
}

function start() {
  onUnauthorized(askForKey);
  $("auth-form").addEventListener("submit", useKey);
  $("forget-key").addEventListener("click", forgetKey);
  $("session-filters").addEventListener("submit", (event) => event.preventDefault());
  $("session-status").addEventListener("change", () => loadSessions());
  $("refresh-sessions").addEventListener("click", () => loadSessions());
  $("load-more").addEventListener("click", () => loadSessions({ more: true }));
  $("travel").addEventListener("input", (event) => travelTo(Number(event.target.value)));
  $("travel-live").addEventListener("click", () => current && travelTo(current.last));
  $("fork").addEventListener("click", forkHere);
  // The skip link must not replace the session's address in the hash.
  document.querySelector(".skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("main").focus();
  });
  startSearch();
  window.addEventListener("scroll", checkEdges, { passive: true });
  window.addEventListener("hashchange", () => {
    if (location.hash.startsWith("#/") || location.hash === "") route();
  });
  loadSessions().then(route);
}

start();

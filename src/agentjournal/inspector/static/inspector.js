// The inspector page: the sessions list, one session's timeline followed live over SSE, a
// time-travel slider, "Fork here", and the API key form. It uses only the public /v1 API.

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
import { buildItems, describe, foldTasks } from "./fold.js";
import { formatDateTime, h, keyedList } from "./dom.js";
import { renderItem, renderTask } from "./render.js";
import { SessionList } from "./sessions.js";
import { followStream } from "./sse.js";

const $ = (id) => document.getElementById(id);
const EVENT_PAGE = 1000;

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
let forking = false;

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
  await loadSessions();
  route();
}

function forgetKey() {
  apiKey.clear();
  sessions.clear();
  askForKey();
}

async function loadSessions(options) {
  if (await sessions.load(options)) $("forget-key").hidden = apiKey.get() === null;
}

// ---- one session -------------------------------------------------------------------------

function closeSession() {
  generation += 1;
  current?.stream?.close();
  current = null;
  // Item keys are seqs, the same in every session: another session's elements must not be reused.
  for (const id of ["timeline", "tasks"]) {
    $(id).keyedCache = null;
    $(id).replaceChildren();
  }
}

function sessionLink(id) {
  return h("a", { href: `#/sessions/${encodeURIComponent(id)}` }, id);
}

async function openSession(id) {
  closeSession();
  const mine = generation;
  showProblem(null);
  showView("session");
  $("session-title").textContent = "Loading…";
  for (const control of ["travel", "travel-live", "fork"]) $(control).disabled = true;
  $("session-facts").replaceChildren();
  $("live-state").textContent = "";
  let session, events, tasks;
  try {
    session = await api(sessionPath(id));
    events = await all(
      sessionPath(id, "/events"),
      { limit: EVENT_PAGE },
      (p) => p.events,
      (p) => p.next_after,
      "after",
    );
    // After the events: a task created meanwhile is then in this list or in the stream.
    tasks = await all(
      "v1/tasks",
      { session_id: id, limit: EVENT_PAGE },
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
  const last = events.length ? events.at(-1).seq : 0;
  current = {
    id,
    session,
    events,
    last,
    upto: last,
    following: true,
    taskIds: new Set(tasks.map((t) => t.task_id)),
    open: new Set(),
    stream: null,
  };
  sessions.update(session);
  renderSession();
  $("session-title").focus();
  current.stream = followStream(url(sessionPath(id, "/events/stream")), {
    headers: () => apiKey.headers(),
    lastEventId: String(last),
    onEvent: (frame) => mine === generation && receive(frame),
    onState: (state, detail) => mine === generation && showLiveState(state, detail),
    onUnauthorized: notifyUnauthorized,
  });
}

function showLiveState(state, detail) {
  const el = $("live-state");
  const text = {
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting…",
    closed: detail === "gone" ? "Stream closed: the session is gone" : "Not following",
  }[state];
  el.textContent = text;
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
  current.events.push(event);
  current.last = event.seq;
  if (current.following) current.upto = event.seq;
  const session = current.session;
  session.last_seq = event.seq;
  session.event_count += 1;
  session.updated_at = event.created_at;
  if (event.type === "session_updated") Object.assign(session, event.payload);
  // A fork's copied task events made no tasks; anything created after the fork point did.
  if (event.type === "task_created" && event.seq > (session.forked_at_seq ?? 0)) {
    current.taskIds.add(event.payload.task_id);
  }
  sessions.update(session);
  const fresh = renderSession();
  for (const node of fresh) node.classList.add("fresh");
  announce(`New ${describe(event)} (event ${event.seq})`);
  if (current.following && nearBottom)
    window.scrollTo({ top: document.documentElement.scrollHeight });
}

function fact(name, ...value) {
  return h("div", {}, h("dt", {}, name), h("dd", {}, ...value));
}

function renderSession() {
  const { session, events, last, upto, following } = current;
  $("session-title").textContent = session.title || "(untitled)";
  const facts = [
    fact("Session", h("code", {}, session.session_id)),
    fact("Status", session.status),
    session.model ? fact("Model", session.model) : null,
    fact("Events", String(last)),
    session.prompt_tokens || session.completion_tokens
      ? fact("Tokens", `${session.prompt_tokens} in · ${session.completion_tokens} out`)
      : null,
    session.forked_from
      ? fact("Forked from", sessionLink(session.forked_from), ` at #${session.forked_at_seq}`)
      : null,
    fact("Created", formatDateTime(session.created_at)),
  ];
  $("session-facts").replaceChildren(...facts.filter(Boolean));

  const slider = $("travel");
  slider.max = String(Math.max(1, last));
  slider.value = String(Math.max(1, upto));
  slider.disabled = last <= 1;
  const where = `event ${upto} of ${last}`;
  slider.setAttribute("aria-valuetext", `${where}: ${describe(events[upto - 1])}`);
  $("travel-output").textContent = following ? `${where} · live` : where;
  $("travel-live").disabled = following;
  $("fork").disabled = forking;

  const ctx = { open: current.open, travelTo, sessionLink };
  const items = buildItems(events, upto);
  const fresh = keyedList(
    $("timeline"),
    items,
    (i) => i.key,
    (i) => i.version,
    (i) => renderItem(ctx, i),
  );
  const hidden = last - upto;
  $("timeline-end").textContent = hidden
    ? `${hidden} later event${hidden === 1 ? "" : "s"} hidden: move the slider or press “Back to live”.`
    : "";

  const tasks = foldTasks(events, upto, (id) => current.taskIds.has(id));
  $("tasks-heading").textContent = following ? "Tasks" : `Tasks as of event ${upto}`;
  if (tasks.length === 0) {
    $("tasks").keyedCache = null;
    $("tasks").replaceChildren(h("li", { class: "muted" }, "No tasks in this session."));
  } else {
    if (!$("tasks").keyedCache) $("tasks").replaceChildren();
    keyedList(
      $("tasks"),
      tasks,
      (t) => t.task_id,
      (t) => JSON.stringify(t),
      (t) => renderTask(ctx, t),
    );
  }
  return fresh;
}

function travelTo(seq) {
  if (!current) return;
  current.upto = Math.max(1, Math.min(seq, current.last));
  current.following = current.upto === current.last;
  renderSession();
}

async function forkHere() {
  if (!current) return;
  const { id, upto } = current;
  forking = true;
  $("fork").disabled = true;
  try {
    const fork = await api(sessionPath(id, "/fork"), { method: "POST", body: { at_seq: upto } });
    announce(`Forked at event ${upto} into ${fork.title || fork.session_id}`);
    await loadSessions();
    location.hash = `#/sessions/${encodeURIComponent(fork.session_id)}`;
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) showProblem(error);
  } finally {
    forking = false;
    $("fork").disabled = current === null;
  }
}

// ---- routing and start-up ----------------------------------------------------------------

function route() {
  if (!$("auth-view").hidden) return;
  const match = /^#\/sessions\/(.+)$/.exec(location.hash);
  if (match) {
    openSession(decodeURIComponent(match[1]));
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
  $("session-search").addEventListener("input", () => sessions.render());
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
  window.addEventListener("hashchange", () => {
    if (location.hash.startsWith("#/") || location.hash === "") route();
  });
  loadSessions().then(route);
}

start();

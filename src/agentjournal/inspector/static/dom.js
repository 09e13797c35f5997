// DOM helpers. Every piece of data enters the document as text (text nodes, textContent,
// attribute values): nothing here parses HTML, so what an agent wrote cannot become markup.

import { prettyJson } from "./json.js";

/** Creates an element; string children become text nodes, never markup. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";

/**
 * Where the focused `el` is inside `root`, in terms that survive a rebuild: the data-key of its
 * nearest keyed ancestor (a <details>: keys are unique on the page), and its place among that
 * ancestor's focusable elements. Rebuilt nodes are new elements, so identity cannot be used.
 */
function focusSpot(root, el) {
  const keyed = el.closest("[data-key]");
  const scope = keyed && root.contains(keyed) ? keyed : root;
  const index = [...scope.querySelectorAll(FOCUSABLE)].indexOf(el);
  return { key: scope === root ? null : scope.dataset.key, index };
}

/** The element of `root` at `spot`, else its first focusable element, else null. */
function atSpot(root, { key, index }) {
  const scope = key === null ? root : root.querySelector(`[data-key="${CSS.escape(key)}"]`);
  const inScope = scope ? [...scope.querySelectorAll(FOCUSABLE)] : [];
  return inScope[index] ?? inScope.at(-1) ?? root.querySelector(FOCUSABLE);
}

/**
 * Shows `items` in `container` in order, reusing the element of an item whose version did not
 * change. An item whose version changed is rebuilt; if it held the focus, the focus moves to the
 * same control in the new element (else it would fall back to <body> and a keyboard user would
 * start again from the top). Open <details> survive through details() below.
 */
export function keyedList(container, items, keyOf, versionOf, build) {
  const cache = container.keyedCache ?? new Map();
  const next = new Map();
  const fresh = [];
  const focused = document.activeElement;
  let refocus = null;
  const nodes = items.map((item) => {
    const key = keyOf(item);
    const version = versionOf(item);
    const cached = cache.get(key);
    if (cached && cached.version === version) {
      next.set(key, cached);
      return cached.node;
    }
    const node = build(item);
    next.set(key, { version, node });
    fresh.push(node);
    if (cached && cached.node.contains(focused)) {
      refocus = { node, spot: focusSpot(cached.node, focused) };
    }
    return node;
  });
  container.keyedCache = next;
  // Out first, so that the nodes kept are not in the way: each new node is then inserted at its
  // place, and the kept ones after it stay where they are (moving a node drops its focus).
  const kept = new Set(nodes);
  for (const child of [...container.childNodes]) if (!kept.has(child)) child.remove();
  let cursor = container.firstChild;
  for (const node of nodes) {
    if (cursor === node) {
      cursor = cursor.nextSibling;
    } else {
      container.insertBefore(node, cursor);
    }
  }
  // preventScroll: the control is where it was; scrolling to it would make the page jump.
  if (document.activeElement !== focused) {
    const target = focused?.isConnected ? focused : refocus && atSpot(refocus.node, refocus.spot);
    target?.focus({ preventScroll: true });
  }
  return fresh;
}

const TIME = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});
const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export const formatDateTime = (ms) => DATE_TIME.format(new Date(ms));

export function time(ms) {
  const date = new Date(ms);
  return h(
    "time",
    { datetime: date.toISOString(), title: DATE_TIME.format(date) },
    TIME.format(date),
  );
}

/** JSON text pretty-printed (numbers as written) when it parses; otherwise the text as it is. */
export function pretty(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  const trimmed = text.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return prettyJson(trimmed);
    } catch {
      // not JSON after all (or nested too deep to print)
    }
  }
  return text;
}

export const percent = (progress) =>
  Math.round(Math.max(0, Math.min(1, Number(progress) || 0)) * 100);

/**
 * A <details> whose open state survives re-rendering: `ctx.open` holds the keys of the open
 * ones. `fill()` builds the body the first time it is opened (raw JSON on demand).
 */
export function details(ctx, key, props, summary, fill) {
  const body = h("div", { class: "details-body" });
  const el = h(
    "details",
    { ...props, dataset: { ...(props.dataset ?? {}), key } },
    h("summary", {}, summary),
    body,
  );
  const ensure = () => {
    if (el.open && !body.hasChildNodes()) body.append(...[fill()].flat());
  };
  el.addEventListener("toggle", () => {
    if (el.open) ctx.open.add(key);
    else ctx.open.delete(key);
    ensure();
  });
  if (ctx.open.has(key)) {
    el.open = true;
    ensure();
  }
  return el;
}

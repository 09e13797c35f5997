// DOM helpers. Every piece of data enters the document as text (text nodes, textContent,
// attribute values): nothing here parses HTML, so what an agent wrote cannot become markup.

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

/**
 * Shows `items` in `container` in order, reusing the element of an item whose version did not
 * change, and moving nothing that stays in place: focus and open <details> survive updates.
 */
export function keyedList(container, items, keyOf, versionOf, build) {
  const cache = container.keyedCache ?? new Map();
  const next = new Map();
  const fresh = [];
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
    return node;
  });
  container.keyedCache = next;
  let cursor = container.firstChild;
  for (const node of nodes) {
    if (cursor === node) {
      cursor = cursor.nextSibling;
    } else {
      container.insertBefore(node, cursor);
    }
  }
  while (cursor) {
    const after = cursor.nextSibling;
    cursor.remove();
    cursor = after;
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

/** JSON text pretty-printed when it parses; otherwise the text as it is. */
export function pretty(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  const trimmed = text.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return JSON.stringify(JSON.parse(trimmed), null, 2);
    } catch {
      // not JSON after all
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

// The /v1 API as the page uses it. The API key lives in this tab's sessionStorage and travels
// only in the Authorization header: never in a URL, where logs and history would keep it.

const KEY_NAME = "agentjournal.apiKey";

export const apiKey = {
  get() {
    return sessionStorage.getItem(KEY_NAME);
  },
  set(value) {
    sessionStorage.setItem(KEY_NAME, value);
  },
  clear() {
    sessionStorage.removeItem(KEY_NAME);
  },
  headers() {
    const key = sessionStorage.getItem(KEY_NAME);
    return key ? { Authorization: `Bearer ${key}` } : {};
  },
};

/** An answer other than 2xx, with the problem+json's title and detail when there is one. */
export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title;
    this.detail = detail;
  }
}

let unauthorized = () => {};

/** Called whenever the API answers 401 (no key, or a key it does not accept). */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function notifyUnauthorized() {
  unauthorized();
}

/** A URL of this service, relative to the page, so the inspector also works under a prefix. */
export function url(path, query = {}) {
  const found = new URL(path, document.baseURI);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") {
      found.searchParams.set(name, String(value));
    }
  }
  return found;
}

export const sessionPath = (id, rest = "") => `v1/sessions/${encodeURIComponent(id)}${rest}`;

/** fetch + JSON; throws ApiError for any answer other than 2xx. `signal` aborts it (an
 * AbortSignal; the caller then ignores what it throws). */
export async function api(path, { method = "GET", query, body, signal } = {}) {
  const headers = { Accept: "application/json", ...apiKey.headers() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      signal,
    });
  } catch (error) {
    throw new ApiError(0, "The service cannot be reached", String(error.message || error));
  }
  if (response.status === 401) {
    unauthorized();
    throw new ApiError(401, "Unauthorized", "An API key is required.");
  }
  if (!response.ok) {
    let problem = {};
    try {
      problem = await response.json();
    } catch {
      // not problem+json: the status says enough
    }
    throw new ApiError(response.status, problem.title, problem.detail);
  }
  return response.status === 204 ? null : response.json();
}

/** Every page of a paged list: `pick(page)` gives the items, `cursor(page)` the next cursor. */
export async function all(path, query, pick, cursor, cursorName) {
  const found = [];
  let next = null;
  do {
    const page = await api(path, { query: { ...query, [cursorName]: next } });
    found.push(...pick(page));
    next = cursor(page);
  } while (next !== null && next !== undefined);
  return found;
}

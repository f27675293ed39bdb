// The REST API (/api/v1) with the session cookie, the CSRF token on every change and an
// idempotency key on every POST.
export const CSRF = document.querySelector('meta[name="parley-csrf"]').content;

export class Problem extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// A read whose page is no longer shown: its answer (an error too) is nobody's to show.
// Erasing a person while their memory page still loaded put that page's "no such user"
// over the People page the dashboard had moved to.
export class Stale extends Problem {
  constructor() { super(0, "a read of a page no longer shown"); this.stale = true; }
}

let shown = 0;  // which showing of a page the reads made now belong to

// The router is showing a page (another, or the same afresh): reads still out are stale.
export function newPage() { shown += 1; }

export async function reach(url, init) {
  try {
    return await fetch(url, init);
  } catch {
    throw new Problem(0, "The gateway did not answer. Is it running?");
  }
}

export async function api(method, path, body, headers) {
  const init = { method, headers: { ...(headers || {}) }, credentials: "same-origin" };
  if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  if (method === "POST") init.headers["Idempotency-Key"] = crypto.randomUUID();
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const page = shown;
  const r = await reach("/api/v1" + path, init);
  if (method === "GET" && page !== shown) throw new Stale();
  if (r.status === 401) { location.assign("/admin/signin"); throw new Problem(401, "signed out"); }
  const data = r.status === 204 ? null : await r.json().catch(() => null);
  if (!r.ok) throw new Problem(r.status, (data && data.error && data.error.message) || r.statusText);
  return { data, etag: r.headers.get("ETag") };
}

export async function get(path) { return (await api("GET", path)).data; }

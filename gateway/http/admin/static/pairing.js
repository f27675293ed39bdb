// Pairing requests: someone on a `pairing` channel asked to talk to the assistant. Most
// are not people yet (nothing of theirs is stored until they are let in).
import { api, get } from "./api.js";
import { action, ago, h, say } from "./dom.js";

// Every request waiting, oldest first, page after page (each channel holds at most
// `PARLEY_PAIRING_MAX_PENDING`, so one page nearly always has them all).
export async function waitingRequests() {
  const requests = [];
  const query = new URLSearchParams({ limit: "500" });
  for (;;) {
    const page = await get("/pairing?" + query);
    requests.push(...page.items);
    if (!page.next_cursor) return requests;
    query.set("cursor", page.next_cursor);
  }
}

// The requests as a list with Approve and Reject; `done` runs after either.
export function pairingList(requests, done) {
  return h("ul", { class: "list", "aria-label": "Pairing requests" }, requests.map((p) => h("li", { "data-code": p.code },
    h("strong", {}, p.display_name || p.external_id), " ", h("span", { class: "badge" }, p.channel),
    h("span", { class: "badge warn" }, "pairing pending"),
    h("span", { class: "muted" }, ` ${p.external_id} · code ${p.code} · asked ${ago(p.created_at)} ago `),
    action("Approve", async () => { await api("POST", `/pairing/${p.code}/approve`); say(`Approved ${p.code}.`); await done(); }, "primary"),
    action("Reject", async () => { await api("POST", `/pairing/${p.code}/reject`); say(`Rejected ${p.code}.`); await done(); }))));
}

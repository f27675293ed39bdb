// Work that waits on an operator: pairing requests, failed deliveries, stuck jobs.
import { api, get } from "./api.js";
import { action, h, say, show, when } from "./dom.js";
import { pairingList, waitingRequests } from "./pairing.js";

export async function operationsPage() {
  const pairing = h("section", {}, h("h2", {}, "Pairing requests"));
  const deliveries = h("section", {}, h("h2", {}, "Failed deliveries"));
  const jobs = h("section", {}, h("h2", {}, "Archive and profile jobs that keep failing"));
  show("Operations", h("h1", {}, "Operations"), pairing, deliveries, jobs);
  const requests = await waitingRequests();
  pairing.append(requests.length ? pairingList(requests, operationsPage) : h("p", {}, "None waiting."));
  const failed = (await get("/deliveries?state=failed&limit=100")).items;
  deliveries.append(failed.length ? h("ul", { class: "list" }, failed.map((m) => h("li", { "data-message": m.id },
    h("span", { class: "badge" }, m.channel), `#${m.seq} · ${when(m.created_at)} · `,
    h("span", { class: "reason bad" }, m.delivery_error || "refused"), " ",
    h("span", {}, m.text.slice(0, 120)), " ",
    action("Retry", async () => { await api("POST", `/deliveries/${m.id}/retry`); say("Queued to be sent again."); await operationsPage(); }))))
    : h("p", {}, "None."));
  const stuck = (await get("/jobs?state=failed&limit=100")).items;
  jobs.append(stuck.length ? h("ul", { class: "list" }, stuck.map((j) => h("li", { "data-job": j.id },
    `${j.id} · ${j.attempts} attempts · `, h("span", { class: "reason muted" }, j.last_error || ""), " ",
    action("Retry now", async () => { await api("POST", `/jobs/${encodeURIComponent(j.id)}/retry`); say("Retrying."); await operationsPage(); }))))
    : h("p", {}, "None."));
}

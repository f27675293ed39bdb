// A person's reminders and follow-ups: when each is next due (on their wall clock, in
// their zone), how it repeats, who set it, its firings, and a cancel for pending ones.
import { api, get } from "./api.js";
import { action, h, refresh, say, when } from "./dom.js";

export async function reminders(body, person) {
  const page = await get(`/users/${person.id}/reminders`);
  const list = h("ul", { class: "list", "aria-label": "Reminders" });
  for (const item of page.items) list.append(reminder(item));
  body.append(h("section", {}, h("h2", {}, "Reminders and follow-ups"),
    h("p", { class: "muted" }, `Times are ${person.display_name || "their"}'s own, in ${person.timezone}.`),
    page.items.length ? list : h("p", {}, "None yet.")));
}

function reminder(item) {
  const kind = item.kind === "follow_up" ? "follow-up" : "reminder";
  const next = item.when ? `next ${local(item.when)}` : item.state;
  const repeat = item.repeat ? ` · repeats ${item.repeat}` : "";
  const firings = h("ol", { class: "firings", "aria-label": "Firings" }, item.firings.map((f) =>
    h("li", {}, `${when(f.due_at)} — ${f.outcome}`,
      f.missed ? ` (${f.missed} missed due times collapsed)` : "",
      f.detail ? `: ${f.detail}` : "")));
  return h("li", { "data-reminder": item.id },
    h("div", {}, h("strong", {}, item.text)),
    h("div", { class: "muted" }, `${kind} · ${next}${repeat} · set by ${item.created_by} on ${when(item.created_at)}`),
    item.fired ? h("div", { class: "muted" }, `${item.fired === 1 ? "fired once" : `fired ${item.fired} times`}${item.fired > item.firings.length ? ", the newest shown" : ""}:`) : null,
    item.firings.length ? firings : null,
    item.state === "active" ? action("Cancel", async () => {
      if (!confirm(`Cancel “${item.text}”?`)) return;
      await api("DELETE", `/reminders/${item.id}`);
      say("Cancelled.");
      await refresh();
    }) : null);
}

// `2027-03-02T09:00:00+01:00[Europe/Berlin]` as the person's wall clock reads it.
function local(rfc9557) {
  const [stamp, zone] = rfc9557.split("[");
  return `${stamp.slice(0, 10)} ${stamp.slice(11, 16)} (${zone.slice(0, -1)})`;
}

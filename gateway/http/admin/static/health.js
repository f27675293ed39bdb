// How the gateway is doing: channels, the work waiting and for how long, and charts from
// the database.
import { get } from "./api.js";
import { bars, dots } from "./chart.js";
import { ago, h, scroller, show, when } from "./dom.js";

export async function healthPage() {
  const stats = await get("/stats?days=30");
  show("Health", h("h1", {}, "Health"), channels(stats), waiting(stats), traffic(stats), prompts(stats));
}

function channels(stats) {
  return h("section", {}, h("h2", {}, "Channels"), scroller(h("table", {},
    h("thead", {}, h("tr", {}, ["Channel", "On", "Connection", "Last heard", "Last sent", "Connection held by"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, stats.channels.map((c) => h("tr", { "data-channel": c.channel },
      h("th", { scope: "row" }, c.channel),
      h("td", {}, c.enabled ? "yes" : "no"),
      // None: off, or no connection of its own (the platform's webhooks or browsers call in).
      h("td", {}, c.connection !== null ? h("span", { class: `badge ${c.connection === "connected" ? "" : "bad"}` }, c.connection)
        : c.enabled ? "none needed: it calls in" : "—"),
      h("td", {}, c.last_inbound_at ? when(c.last_inbound_at) : "never"),
      h("td", {}, c.last_sent_at ? when(c.last_sent_at) : "never"),
      h("td", {}, c.leader ? (c.leader === stats.replica ? "this replica" : c.leader) : "—")))))));
}

// How far behind the background work is: how much waits, and how long the oldest has.
function waiting(stats) {
  const queues = [
    ["summaries", "Archive summaries", "since its chunk was cut"],
    ["extractions", "Fact extractions", "since its chunk was cut"],
    ["deliveries", "Replies to deliver", "since it was written"],
  ];
  const chunks = Object.entries(stats.archive.chunks).map(([state, n]) => `${n} ${state}`).join(" · ");
  return h("section", {}, h("h2", {}, "Waiting work"), scroller(h("table", {},
    h("thead", {}, h("tr", {}, ["Queue", "Waiting", "Oldest waiting", "For"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, queues.map(([key, label, since]) => {
      const q = stats.queues[key];
      return h("tr", { "data-queue": key },
        h("th", { scope: "row" }, label),
        h("td", {}, String(q.waiting)),
        h("td", {}, q.oldest_at ? `${when(q.oldest_at)} (${since})` : "—"),
        h("td", {}, q.oldest_at ? ago(q.oldest_at) : "—"));
    })))),
    h("p", { class: "muted" }, `Archive chunks: ${chunks || "none yet"}.`));
}

function traffic(stats) {
  const names = [...new Set(stats.messages_per_day.map((d) => d.channel))];
  const count = new Map(stats.messages_per_day.map((d) => [`${d.day} ${d.channel}`, d.messages]));
  return h("section", {}, h("h2", {}, "Messages per day"),
    bars("Messages per day, by channel", stats.days,
      names.map((n) => ({ name: n, values: stats.days.map((d) => count.get(`${d} ${n}`) || 0) })), null));
}

function prompts(stats) {
  // A day without turns has no mean: no bar, rather than a bar at 0.
  const byDay = new Map(stats.prompt_tokens_per_day.map((d) => [d.day, d]));
  const perDay = stats.days.map((day) => byDay.get(day) || { day, mean: null, largest: null });
  const turns = stats.prompt_tokens_per_turn.map((t) => ({ at: t.at, value: t.prompt_tokens }));
  return h("section", {}, h("h2", {}, "Prompt tokens per turn"),
    h("p", { class: "muted" }, `The prompt may never pass ${stats.prompt_limit.toLocaleString()} tokens; memory keeps it well below. Each turn's prompt is estimated as its reply is written.`),
    dots(`Each turn's prompt tokens (the newest ${turns.length})`, "prompt tokens", turns, stats.prompt_limit),
    bars("Each day's turns: mean and largest prompt tokens", perDay.map((d) => d.day),
      [{ name: "mean", values: perDay.map((d) => d.mean) }, { name: "largest", values: perDay.map((d) => d.largest) }],
      stats.prompt_limit));
}

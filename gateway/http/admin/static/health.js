// How the gateway is doing: channels, the archive's backlog, and charts from the database.
import { get } from "./api.js";
import { chart } from "./chart.js";
import { h, show, when } from "./dom.js";

export async function healthPage() {
  const stats = await get("/stats?days=30");
  const channels = h("section", {}, h("h2", {}, "Channels"), h("table", {},
    h("thead", {}, h("tr", {}, ["Channel", "On", "Connection", "Last heard", "Last sent", "Connection held by"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, stats.channels.map((c) => h("tr", { "data-channel": c.channel },
      h("th", { scope: "row" }, c.channel),
      h("td", {}, c.enabled ? "yes" : "no"),
      // None: no connection of its own; the platform (webhooks) or browsers call in.
      h("td", {}, c.connection === null ? "none needed: it calls in" : h("span", { class: `badge ${c.connection === "connected" ? "" : "bad"}` }, c.connection)),
      h("td", {}, c.last_inbound_at ? when(c.last_inbound_at) : "never"),
      h("td", {}, c.last_sent_at ? when(c.last_sent_at) : "never"),
      h("td", {}, c.leader ? (c.leader === stats.replica ? "this replica" : c.leader) : "—"))))));
  const waiting = stats.archive.oldest_waiting;
  const archive = h("section", {}, h("h2", {}, "Archive"), h("p", {},
    Object.entries(stats.archive.chunks).map(([state, n]) => `${n} ${state}`).join(" · ") || "no chunks",
    ` · ${stats.archive.to_extract} waiting for fact extraction · `,
    waiting ? `oldest summary waiting since ${when(waiting)}` : "no summary waiting"));
  const days = [...new Set(stats.messages_per_day.map((d) => d.day))];
  const names = [...new Set(stats.messages_per_day.map((d) => d.channel))];
  const count = (day, channel) => (stats.messages_per_day.find((d) => d.day === day && d.channel === channel) || { messages: 0 }).messages;
  const traffic = h("section", {}, h("h2", {}, "Messages per day"),
    chart("Messages per day, by channel", days, names.map((n) => ({ name: n, values: days.map((d) => count(d, n)) })), null));
  const prompt = stats.prompt_tokens_per_day;
  const bounded = h("section", {}, h("h2", {}, "Prompt tokens per turn"),
    h("p", { class: "muted" }, `The prompt may never pass ${stats.prompt_limit.toLocaleString()} tokens; memory keeps it well below.`),
    chart("Prompt tokens per turn, by day", prompt.map((d) => d.day),
      [{ name: "mean", values: prompt.map((d) => d.mean) }, { name: "largest", values: prompt.map((d) => d.largest) }],
      stats.prompt_limit));
  show("Health", h("h1", {}, "Health"), channels, archive, traffic, bounded);
}

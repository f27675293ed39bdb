// What the models cost: tokens per day (turns apart from background work) and, per
// person or group, tokens and US dollars (PARLEY_LLM_PRICES) over the last 30 days.
import { get } from "./api.js";
import { bars } from "./chart.js";
import { h, scroller, show } from "./dom.js";

const tokens = (t) => t.prompt_tokens + t.completion_tokens;
// Cents, or for less than a cent its first digits (a test deployment's costs are tiny).
const money = (usd) => (usd === 0 || usd >= 0.01 ? usd.toFixed(2) : String(Number(usd.toPrecision(2))));
const dollars = (t) => t.cost_usd === null ? "no price" : `$${money(Number(t.cost_usd))}${t.unpriced_tokens ? " + unpriced" : ""}`;

function days(since, until) {
  const out = [];
  for (let d = new Date(`${since}T00:00:00Z`); d <= new Date(`${until}T00:00:00Z`); d.setUTCDate(d.getUTCDate() + 1)) out.push(d.toISOString().slice(0, 10));
  return out;
}

export async function usagePage() {
  const [daily, people] = await Promise.all([get("/usage?group_by=day"), get("/usage?group_by=user")]);
  const labels = days(daily.from, daily.to);
  const byDay = new Map(daily.rows.map((r) => [r.key, r]));
  const series = [["turns", "turns"], ["background", "background work"]].map(([part, name]) => ({
    name, values: labels.map((d) => (byDay.has(d) ? tokens(byDay.get(d)[part]) : 0)),
  }));
  const total = daily.total;
  show("Usage", h("h1", {}, "Usage"),
    h("p", {}, `Last 30 days: ${tokens(total).toLocaleString()} tokens in ${total.calls.toLocaleString()} model call${total.calls === 1 ? "" : "s"}, ${dollars(total)}.`),
    h("section", {}, h("h2", {}, "Tokens per day"),
      bars("Tokens per day: turns and background work (summaries, facts, tidying)", labels, series, null)),
    h("section", {}, h("h2", {}, "By person"), people.rows.length ? scroller(h("table", { class: "usage" },
      h("thead", {}, h("tr", {}, ["Who", "Turn tokens", "Background tokens", "Calls", "Cost"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, [...people.rows].sort((a, b) => tokens(b.total) - tokens(a.total)).map((r) => h("tr", { "data-subject": r.key },
        h("th", { scope: "row" }, r.group ? h("span", {}, h("span", { class: "badge" }, "group"), " ", r.name || r.key)
          : h("a", { href: `#/people/${r.key}` }, r.name || r.key)),
        h("td", {}, tokens(r.turns).toLocaleString()),
        h("td", {}, tokens(r.background).toLocaleString()),
        h("td", {}, String(r.total.calls)),
        h("td", {}, dollars(r.total)))))))
      : h("p", {}, "No model calls in these 30 days.")));
}

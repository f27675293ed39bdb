// People, not channels: find anyone by name or by words they said, and open one.
import { get } from "./api.js";
import { identityBadges, stateBadges } from "./badges.js";
import { conversation } from "./conversation.js";
import { h, refresh, show, when } from "./dom.js";
import { memory } from "./memory.js";
import { pairingList, waitingRequests } from "./pairing.js";
import { reminders } from "./reminders.js";

const NEEDS = [["", "everyone"], ["reply", "awaiting a reply"], ["delivery", "a failed delivery"],
  ["archive", "an archive error"], ["pairing", "a pairing request"]];

export async function peoplePage(params) {
  const q = params.get("q") || "";
  const needs = params.get("needs") || "";
  const box = h("input", { id: "q", type: "search", value: q, placeholder: "a name, or words they said" });
  const filter = h("select", { id: "needs" }, NEEDS.map(([value, label]) =>
    h("option", { value, selected: value === needs }, label)));
  const go = () => {
    const query = new URLSearchParams();
    if (box.value.trim()) query.set("q", box.value.trim());
    if (filter.value) query.set("needs", filter.value);
    location.hash = "#/people" + (query.toString() ? "?" + query : "");
  };
  filter.addEventListener("change", go);
  const form = h("form", { class: "row", role: "search", onsubmit: (e) => { e.preventDefault(); go(); } },
    h("label", { for: "q" }, "Find a person"), box,
    h("label", { for: "needs" }, "with"), filter,
    h("button", { type: "submit" }, "Search"));
  const list = h("ul", { class: "list", "aria-label": "People" });
  // Who asks to be let in comes first: without a search or with the pairing filter.
  const asking = h("section", { "aria-label": "Asking to be let in" });
  show("People", h("h1", {}, "People"), form, asking, list);
  const query = new URLSearchParams({ limit: "100" });
  if (q) query.set("q", q);
  if (needs) query.set("needs", needs);
  const [page, requests] = await Promise.all([get("/users?" + query),
    !q && (!needs || needs === "pairing") ? waitingRequests() : []]);
  if (requests.length) {
    asking.append(h("h2", {}, "Asking to be let in"), pairingList(requests, refresh),
      h("h2", {}, needs ? "Known people with a request" : "Everyone"));
  }
  if (!page.items.length) list.append(h("li", {}, q || needs ? "Nobody matches." : "Nobody yet."));
  for (const person of page.items) {
    list.append(h("li", {},
      h("a", { href: `#/people/${person.id}` }, person.display_name || "(no name)"), " ",
      identityBadges(person), stateBadges(person.state),
      h("div", { class: "muted" }, `since ${when(person.created_at)} · ${person.timezone}`)));
  }
}

export async function personPage(id, tab, params) {
  const person = await get(`/users/${id}`);
  const talk = person.conversations[0];
  const tabs = h("nav", { class: "tabs", "aria-label": "Person" },
    h("a", { href: `#/people/${id}`, "aria-current": tab === "conversation" ? "page" : null }, "Conversation"),
    h("a", { href: `#/people/${id}/memory`, "aria-current": tab === "memory" ? "page" : null }, "Memory"),
    h("a", { href: `#/people/${id}/reminders`, "aria-current": tab === "reminders" ? "page" : null }, "Reminders"));
  // The conversation's live status has its line from the start: added once the
  // messages are in, it pushed the tabs down under the pointer of whoever clicked one.
  const heading = h("div", {},
    h("h1", {}, person.display_name || "(no name)"),
    tab === "conversation" ? h("span", { class: "muted", id: "live" }, "connecting…") : null,
    h("p", {}, identityBadges(person), stateBadges(person.state)));
  const body = h("div", {});
  show(person.display_name || "Person", heading, tabs, body);
  if (tab === "memory") await memory(body, person, talk);
  else if (tab === "reminders") await reminders(body, person);
  else await conversation(body, talk, Number(params.get("seq")) || null);
}

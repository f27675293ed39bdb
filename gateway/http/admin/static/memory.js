// What the assistant remembers of a person: search, the archive down to its verbatim
// transcripts, the profile with its evidence and change log, retired facts, what the
// recall tools looked up; and the person's identities (unlink, merge) and erasure.
import { api, get } from "./api.js";
import { identityBadges } from "./badges.js";
import { action, guarded, h, refresh, say, when } from "./dom.js";

export async function memory(body, person, conversation) {
  const search = h("section", {}, h("h2", {}, "Search everything said"));
  const timeline = h("section", {}, h("h2", {}, "Archive"));
  const profile = h("section", {}, h("h2", {}, "Profile"));
  const lookups = h("section", {}, h("h2", {}, "Looked up by the assistant"));
  const people = h("section", {}, h("h2", {}, "Identities"), identities(person), merging(person));
  const danger = h("section", {}, h("h2", {}, "Erase"),
    h("p", {}, "Everything of this person: messages, archive, profile, files and jobs."),
    action("Erase this person", async () => {
      if (!confirm(`Erase ${person.display_name} and everything of theirs? This cannot be undone.`)) return;
      const erased = (await api("DELETE", `/users/${person.id}`)).data;
      location.hash = "#/people";
      say(`Erased: ${erased.messages} messages, ${erased.chunks} archive rows.`);
    }, "danger"));
  body.append(search, timeline, profile, lookups, people, danger);
  searchBox(search, person, conversation);
  await Promise.all([
    archive(timeline, conversation),
    profileLines(profile, person),
    lookupList(lookups, conversation),
  ]);
}

// Each channel the person is known on; one may leave (unlink) for a person of its own.
function identities(person) {
  return h("ul", { class: "list" }, person.identities.map((i) => h("li", { "data-identity": i.id },
    `${i.channel} · ${i.display_name || i.external_id} (${i.external_id}) `,
    person.identities.length > 1 ? action("Unlink", async () => {
      if (!confirm(`Make ${i.channel} ${i.external_id} a person of its own? The history stays here.`)) return;
      await api("DELETE", `/identities/${i.id}`);
      say("Unlinked.");
      await refresh();
    }) : null)));
}

// Another person found by name becomes part of this one, as /link does.
function merging(person) {
  const box = h("input", { id: "merge-q", type: "search" });
  const found = h("ul", { class: "list", "aria-label": "People to merge" });
  return h("div", {}, h("form", { class: "row", onsubmit: async (e) => {
    e.preventDefault();
    const page = await get(`/users?limit=20&q=${encodeURIComponent(box.value)}`);
    found.replaceChildren(...page.items.filter((p) => p.id !== person.id).map((other) => h("li", {},
      other.display_name || "(no name)", " ", identityBadges(other), " ",
      action(`Merge ${other.display_name} into ${person.display_name}`, async () => {
        if (!confirm(`Make ${other.display_name} part of ${person.display_name}? Their conversations become one.`)) return;
        await api("POST", `/users/${person.id}/merge`, { other_user_id: other.id });
        say("Merged.");
        await refresh();
      }))));
  } }, h("label", { for: "merge-q" }, "Merge another person into this one"), box,
    h("button", { type: "submit" }, "Find")), found);
}

function searchBox(section, person, conversation) {
  const box = h("input", { id: "memory-q", type: "search" });
  const hits = h("ul", { class: "list", "aria-label": "Search results" });
  section.append(h("form", { class: "row", role: "search", onsubmit: async (e) => {
    e.preventDefault();
    const page = await get(`/sessions/${conversation}/search?limit=50&q=${encodeURIComponent(box.value)}`);
    hits.replaceChildren(...(page.items.length ? page.items.map((hit) => h("li", {},
      h("span", { class: "muted" }, when(hit.time) + " · "),
      hit.kind === "message"
        ? h("a", { href: `#/people/${person.id}?seq=${hit.seq}` }, `message #${hit.seq}`)
        : `archive #${hit.chunk_id} (messages #${hit.seq_start}–#${hit.seq_end})`,
      ": ", marked(hit.snippet))) : [h("li", {}, "Nothing found.")]));
  } }, h("label", { for: "memory-q" }, "Words"), box, h("button", { type: "submit" }, "Search")), hits);
}

// A snippet with its «matches» marked: built from text, the marks as elements.
function marked(snippet) {
  return snippet.split(/«([^»]*)»/).map((part, i) => (i % 2 ? h("mark", {}, part) : part));
}

async function archive(section, conversation) {
  const rows = (await get(`/sessions/${conversation}/timeline`)).rows;
  if (!rows.length) { section.append(h("p", {}, "Nothing archived yet.")); return; }
  section.append(h("ul", { class: "rows" }, rows.map(row)));
}

// A timeline row opens to the rows it summarises, and a level-0 row to its transcript.
function row(r) {
  const label = `${when(r.time_start)} – ${when(r.time_end)} · archive #${r.id} · level ${r.level} · messages #${r.seq_start}–#${r.seq_end}` +
    (r.state !== "ready" ? ` · ${r.state}` : "");
  const inside = h("div", {});
  const details = h("details", { "data-chunk": r.id }, h("summary", {}, label), h("p", {}, r.summary || "(no summary yet)"), inside);
  details.addEventListener("toggle", guarded(async () => {
    if (!details.open || inside.childElementCount) return;
    const chunk = await get(`/chunks/${r.id}`);
    if (chunk.children.length) inside.append(h("ul", { class: "rows" }, chunk.children.map(row)));
    else if (chunk.transcript) inside.append(h("pre", { class: "transcript", tabindex: "0", "aria-label": "Transcript" }, chunk.transcript));
    else inside.append(h("p", { class: "muted" }, "No transcript."));
  }));
  return h("li", {}, details);
}

async function profileLines(section, person) {
  const { data: profile, etag } = await api("GET", `/users/${person.id}/profile`);
  const list = h("ol", { class: "profile" });
  const edit = async (edits) => {
    try {
      await api("PATCH", `/users/${person.id}/profile`, { edits }, { "If-Match": etag });
      say("Profile saved.");
    } catch (err) {
      say(err.status === 412 ? "The profile changed meanwhile: shown again, as it is now." : err.message);
    }
    section.replaceChildren(section.firstChild);
    await profileLines(section, person);
  };
  for (const line of profile.lines) {
    const text = h("span", {}, line.text);
    const sources = line.evidence.flatMap((e) => e.seqs.map((seq) =>
      h("a", { href: `#/people/${person.id}?seq=${seq}`, class: "badge" }, `from message #${seq}`)));
    const li = h("li", { "data-line": line.number }, text, " ", sources,
      action("Edit", () => {
        const box = h("input", { value: line.text, "aria-label": `Line ${line.number}`, size: 50 });
        li.replaceChildren(box, action("Save", () => edit([{ replace: [line.number], with: box.value }]), "primary"));
        box.focus();
      }),
      action("Remove", () => edit([{ remove: [line.number] }]), "danger"));
    list.append(li);
  }
  section.append(h("p", { class: "muted" }, `revision ${profile.revision}`), profile.lines.length ? list : h("p", {}, "Nothing yet."));
  const retired = (await get(`/users/${person.id}/retired-facts?limit=100`)).items;
  if (retired.length) {
    section.append(h("h3", {}, "Retired facts"), h("ul", { "aria-label": "Retired facts" }, retired.map((f) =>
      h("li", { "data-reason": f.reason }, h("span", { class: "fact" }, f.text),
        h("span", { class: "muted" }, ` · ${f.reason}, ${when(f.retired_at)}`)))));
  }
  // Who changed it: the model, the person, an operator; newest first.
  const changes = (await get(`/users/${person.id}/profile/changes?limit=50`)).items;
  if (changes.length) {
    section.append(h("h3", {}, "Changes"), h("ol", { class: "changes", "aria-label": "Profile changes" }, changes.map((c) =>
      h("li", { "data-revision": c.revision },
        h("span", { class: "muted" }, `revision ${c.revision} · ${when(c.at)} · `), h("strong", {}, c.by),
        c.added.map((line) => h("div", { class: "added" }, "+ " + line)),
        c.removed.map((line) => h("div", { class: "removed" }, "− " + line))))));
  }
}

async function lookupList(section, conversation) {
  const items = (await get(`/sessions/${conversation}/lookups?limit=50`)).items;
  if (!items.length) { section.append(h("p", {}, "No lookups yet.")); return; }
  section.append(h("ul", { class: "list", "aria-label": "Lookups" }, items.map((l) => h("li", {},
    h("strong", {}, l.tool), " ", h("code", {}, l.arguments),
    h("span", { class: "muted" }, ` · answering #${l.seq}, ${when(l.created_at)}`),
    h("details", {}, h("summary", {}, "what it read"), h("pre", { class: "transcript", tabindex: "0", "aria-label": "What it read" }, l.result))))));
}

// The operator dashboard: a client of the REST API (/api/v1) with the session cookie,
// the CSRF token on every change and an idempotency key on every POST. Everything shown
// is built as elements from text: nothing a person, a model or a platform wrote becomes
// markup. Routes: #/people, #/people/ID[/memory][?seq=N], #/operations.
(() => {
  const CSRF = document.querySelector('meta[name="parley-csrf"]').content;
  const view = document.getElementById("view");
  const toast = document.getElementById("toast");
  const NEWEST = "9007199254740991";
  let leaving = () => {};  // what the current page stops when another is shown

  // -- building blocks --------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) el.addEventListener(key.slice(2), guarded(value));
      else el.setAttribute(key, value === true ? "" : String(value));
    }
    el.append(...children.flat().filter((c) => c !== null && c !== undefined));
    return el;
  }

  function say(text) {
    toast.textContent = text;
    clearTimeout(say.timer);
    say.timer = setTimeout(() => { toast.textContent = ""; }, 5000);
  }

  // An event handler whose failure is said in the toast, not left as an uncaught error.
  function guarded(handler) {
    return async (event) => {
      try { await handler(event); } catch (err) { say(err.message); }
    };
  }

  function when(iso) {
    return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  class Problem extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function reach(url, init) {
    try {
      return await fetch(url, init);
    } catch {
      throw new Problem(0, "The gateway did not answer. Is it running?");
    }
  }

  async function api(method, path, body, headers) {
    const init = { method, headers: { ...(headers || {}) }, credentials: "same-origin" };
    if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
    if (method === "POST") init.headers["Idempotency-Key"] = crypto.randomUUID();
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await reach("/api/v1" + path, init);
    if (r.status === 401) { location.assign("/admin/signin"); throw new Problem(401, "signed out"); }
    const data = r.status === 204 ? null : await r.json().catch(() => null);
    if (!r.ok) throw new Problem(r.status, (data && data.error && data.error.message) || r.statusText);
    return { data, etag: r.headers.get("ETag") };
  }

  async function get(path) { return (await api("GET", path)).data; }

  // Run an action from a button: disabled while it runs, its outcome said aloud.
  function action(label, run, cls) {
    const button = h("button", { type: "button", class: cls }, label);
    button.addEventListener("click", async () => {
      button.disabled = true;
      try { await run(); } catch (err) { say(err.message); } finally { button.disabled = false; }
    });
    return button;
  }

  function show(title, ...content) {
    leaving();
    leaving = () => {};
    document.title = title + " · Parley";
    view.replaceChildren(...content);
    view.focus();
  }

  // -- people --------------------------------------------------------------------

  function stateBadges(state) {
    return [
      state.owes_reply ? h("span", { class: "badge warn" }, "awaiting reply") : null,
      state.failed_deliveries ? h("span", { class: "badge bad" }, `${state.failed_deliveries} failed deliveries`) : null,
      state.archive_errors ? h("span", { class: "badge bad" }, `${state.archive_errors} archive errors`) : null,
    ];
  }

  function identityBadges(person) {
    return person.identities.map((i) => h("span", { class: "badge" }, `${i.channel} · ${i.display_name || i.external_id}`));
  }

  const NEEDS = [["", "everyone"], ["reply", "awaiting a reply"], ["delivery", "a failed delivery"], ["archive", "an archive error"]];

  async function peoplePage(params) {
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
    show("People", h("h1", {}, "People"), form, list);
    const query = new URLSearchParams({ limit: "100" });
    if (q) query.set("q", q);
    if (needs) query.set("needs", needs);
    const page = await get("/users?" + query);
    if (!page.items.length) list.append(h("li", {}, q || needs ? "Nobody matches." : "Nobody yet."));
    for (const person of page.items) {
      list.append(h("li", {},
        h("a", { href: `#/people/${person.id}` }, person.display_name || "(no name)"), " ",
        identityBadges(person), stateBadges(person.state),
        h("div", { class: "muted" }, `since ${when(person.created_at)} · ${person.timezone}`)));
    }
  }

  async function personPage(id, tab, params) {
    const person = await get(`/users/${id}`);
    const conversation = person.conversations[0];
    const tabs = h("nav", { class: "tabs", "aria-label": "Person" },
      h("a", { href: `#/people/${id}`, "aria-current": tab === "conversation" ? "page" : null }, "Conversation"),
      h("a", { href: `#/people/${id}/memory`, "aria-current": tab === "memory" ? "page" : null }, "Memory"));
    const heading = h("div", {},
      h("h1", {}, person.display_name || "(no name)"),
      h("p", {}, identityBadges(person), stateBadges(person.state)));
    const body = h("div", {});
    show(person.display_name || "Person", heading, tabs, body);
    if (tab === "memory") await memory(body, person, conversation);
    else await talk(body, person, conversation, Number(params.get("seq")) || null);
  }

  // -- one conversation, live ---------------------------------------------------------

  async function talk(body, person, conversation, focus) {
    const list = h("ol", { class: "messages", "aria-label": "Messages", "aria-live": "polite" });
    const shown = new Map();  // seq -> element
    let lastSeq = 0;
    const text = h("textarea", { id: "operator-text", rows: 2, required: true });
    const send = h("form", { class: "row", onsubmit: async (e) => {
      e.preventDefault();
      try {
        await api("POST", `/sessions/${conversation}/messages`, { text: text.value });
        text.value = "";
        say("Sent, labelled as from an operator.");
      } catch (err) { say(err.message); }
    } }, h("label", { for: "operator-text" }, "Message from an operator"), text, h("button", { type: "submit", class: "primary" }, "Send"));
    const older = action("Show older", () => loadOlder());
    body.append(older, list, send);

    // Every message in seq order, once: a newer view of one (its delivery) replaces it.
    function render(m) {
      const el = message(m);
      const old = shown.get(m.seq);
      if (old) old.replaceWith(el);
      else {
        const later = [...shown.keys()].filter((s) => s > m.seq).sort((a, b) => a - b)[0];
        if (later !== undefined) list.insertBefore(el, shown.get(later)); else list.append(el);
      }
      shown.set(m.seq, el);
      lastSeq = Math.max(lastSeq, m.seq);
    }

    function message(m) {
      const parts = [`#${m.seq}`, when(m.created_at), m.channel, m.role];
      if (m.source) parts.push(`[source: ${m.source}]`);
      if (m.author_name && m.role === "user") parts.push(m.author_name);
      const el = h("li", { class: `message ${m.role}`, id: `m${m.seq}`, "data-seq": m.seq, "data-delivery": String(m.delivery) },
        h("header", {}, parts.join(" · "), " ",
          m.delivery && m.delivery !== "sent" ? h("span", { class: `badge ${m.delivery === "failed" ? "bad" : "warn"}` }, m.delivery) : null),
        m.text);
      if (m.delivery === "failed") {
        el.append(h("div", { class: "muted" }, m.delivery_error || "the platform refused it"),
          action("Retry delivery", async () => {
            render((await api("POST", `/deliveries/${m.id}/retry`)).data);
            say("Queued to be sent again.");
          }));
      }
      return el;
    }

    async function page(query) {
      return (await get(`/sessions/${conversation}/messages?limit=100&${query}`)).items;
    }

    async function loadOlder() {
      const first = Math.min(...shown.keys(), Number(NEWEST));
      const items = await page(`before_seq=${first}`);
      items.forEach(render);
      if (items.length < 100) older.hidden = true;
    }

    // Everything after the last seq shown, page by page: after a reconnect, nothing missed.
    async function catchUp() {
      for (;;) {
        const items = await page(`after_seq=${lastSeq}`);
        items.forEach(render);
        if (items.length < 100) return;
      }
    }

    (await page(`before_seq=${NEWEST}`)).forEach(render);
    if (shown.size < 100) older.hidden = true;
    if (focus) {
      if (!shown.has(focus)) (await page(`after_seq=${focus - 1}&limit=1`)).slice(0, 1).forEach(render);
      const el = shown.get(focus);
      if (el) { el.classList.add("focus"); el.scrollIntoView({ block: "center" }); }
    } else list.lastElementChild && list.lastElementChild.scrollIntoView({ block: "end" });
    leaving = live(conversation, catchUp);
  }

  // The doorbell: any change rings, and what is new is read by seq from the REST API.
  function live(conversation, catchUp) {
    let socket = null, backoff = 500, stopped = false;
    const status = h("span", { class: "muted", id: "live" }, "connecting…");
    view.querySelector("h1").after(status);
    function connect() {
      const proto = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${proto}//${location.host}/admin/live?session=${conversation}`);
      socket.onmessage = (e) => {
        const frame = JSON.parse(e.data);
        if (frame.type === "ready") { status.textContent = "live"; backoff = 500; }
        if (frame.type === "ready" || frame.type === "changed") catchUp().catch((err) => say(err.message));
      };
      socket.onclose = () => {
        if (stopped) return;
        status.textContent = "reconnecting…";
        setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 10000);
      };
    }
    connect();
    return () => { stopped = true; if (socket) socket.close(); };
  }

  // -- what the assistant remembers ---------------------------------------------------

  async function memory(body, person, conversation) {
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
        say(`Erased: ${erased.messages} messages, ${erased.chunks} archive rows.`);
        location.hash = "#/people";
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
        route();
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
          route();
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

  function row(r) {
    const label = `${when(r.time_start)} – ${when(r.time_end)} · archive #${r.id} · level ${r.level} · messages #${r.seq_start}–#${r.seq_end}` +
      (r.state !== "ready" ? ` · ${r.state}` : "");
    const inside = h("div", {});
    const details = h("details", { "data-chunk": r.id }, h("summary", {}, label), h("p", {}, r.summary || "(no summary yet)"), inside);
    details.addEventListener("toggle", guarded(async () => {
      if (!details.open || inside.childElementCount) return;
      const chunk = await get(`/chunks/${r.id}`);
      if (chunk.children.length) inside.append(h("ul", { class: "rows" }, chunk.children.map(row)));
      else if (chunk.transcript) inside.append(h("pre", { class: "transcript" }, chunk.transcript));
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
      section.append(h("h3", {}, "Retired facts"), h("ul", {}, retired.map((f) =>
        h("li", {}, f.text, h("span", { class: "muted" }, ` · ${f.reason}, ${when(f.retired_at)}`)))));
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
    section.append(h("ul", { class: "list" }, items.map((l) => h("li", {},
      h("strong", {}, l.tool), " ", h("code", {}, l.arguments),
      h("span", { class: "muted" }, ` · answering #${l.seq}, ${when(l.created_at)}`),
      h("details", {}, h("summary", {}, "what it read"), h("pre", { class: "transcript" }, l.result))))));
  }

  // -- operations ---------------------------------------------------------------------

  async function operationsPage() {
    const pairing = h("section", {}, h("h2", {}, "Pairing requests"));
    const deliveries = h("section", {}, h("h2", {}, "Failed deliveries"));
    const jobs = h("section", {}, h("h2", {}, "Archive and profile jobs that keep failing"));
    show("Operations", h("h1", {}, "Operations"), pairing, deliveries, jobs);
    const requests = (await get("/pairing")).items.filter((p) => !p.approved_at);
    pairing.append(requests.length ? h("ul", { class: "list" }, requests.map((p) => h("li", { "data-code": p.code },
      `${p.display_name || p.external_id} on ${p.channel} · code ${p.code} · asked ${when(p.created_at)} `,
      action("Approve", async () => { await api("POST", `/pairing/${p.code}/approve`); say(`Approved ${p.code}.`); await operationsPage(); }, "primary"),
      action("Reject", async () => { await api("POST", `/pairing/${p.code}/reject`); say(`Rejected ${p.code}.`); await operationsPage(); })))) : h("p", {}, "None waiting."));
    const failed = (await get("/deliveries?state=failed&limit=100")).items;
    deliveries.append(failed.length ? h("ul", { class: "list" }, failed.map((m) => h("li", { "data-message": m.id },
      `${m.channel} · #${m.seq} · ${when(m.created_at)} · `, h("span", { class: "badge bad" }, m.delivery_error || "refused"), " ",
      h("span", {}, m.text.slice(0, 120)), " ",
      action("Retry", async () => { await api("POST", `/deliveries/${m.id}/retry`); say("Queued to be sent again."); await operationsPage(); }))))
      : h("p", {}, "None."));
    const stuck = (await get("/jobs?state=failed&limit=100")).items;
    jobs.append(stuck.length ? h("ul", { class: "list" }, stuck.map((j) => h("li", {},
      `${j.kind} · ${j.attempts} attempts · `, h("span", { class: "muted" }, j.last_error || ""), " ",
      action("Retry now", async () => { await api("POST", `/jobs/${encodeURIComponent(j.id)}/retry`); say("Retrying."); await operationsPage(); }))))
      : h("p", {}, "None."));
  }

  // -- health and charts -----------------------------------------------------------------

  async function healthPage() {
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

  // A bar chart drawn as SVG from numbers (series side by side per day), with the same
  // numbers as a table for screen readers and copying. `limit`: a line not to cross.
  function chart(title, labels, series, limit) {
    if (!labels.length) return h("p", {}, "No data yet.");
    const NS = "http://www.w3.org/2000/svg";
    const svg = (tag, attrs) => {
      const el = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
      return el;
    };
    const width = 640, height = 200, left = 48, bottom = 24;
    const top = Math.max(1, limit || 0, ...series.flatMap((s) => s.values));
    const slot = (width - left) / labels.length;
    const bar = Math.min(28, Math.max(1, slot / (series.length + 1)));
    const colours = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626"];
    const y = (v) => (height - bottom) * (1 - v / top);
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title, class: "chart" });
    root.append(svg("line", { x1: left, x2: width, y1: height - bottom, y2: height - bottom, stroke: "currentColor", "stroke-opacity": 0.4 }));
    const scale = svg("text", { x: 0, y: 12, "font-size": 11, fill: "currentColor" });
    scale.textContent = top.toLocaleString();
    root.append(scale);
    series.forEach((s, i) => s.values.forEach((v, j) => {
      const rect = svg("rect", { x: left + j * slot + i * bar, y: y(v), width: bar * 0.9, height: Math.max(0, height - bottom - y(v)), fill: colours[i % colours.length] });
      const tip = svg("title", {});
      tip.textContent = `${labels[j]} · ${s.name}: ${v}`;
      rect.append(tip);
      root.append(rect);
    }));
    if (limit) {
      root.append(svg("line", { x1: left, x2: width, y1: y(limit), y2: y(limit), stroke: "#dc2626", "stroke-dasharray": "4 3" }));
    }
    [0, labels.length - 1].forEach((j) => {
      const t = svg("text", { x: left + j * slot, y: height - 6, "font-size": 11, fill: "currentColor" });
      t.textContent = labels[j];
      root.append(t);
    });
    const legend = h("p", { class: "legend" }, series.map((s, i) =>
      h("span", { class: "badge", style: null, "data-colour": i }, s.name)));
    const table = h("details", {}, h("summary", {}, "As a table"), h("table", {},
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Day"), series.map((s) => h("th", { scope: "col" }, s.name)))),
      h("tbody", {}, labels.map((label, j) => h("tr", {}, h("th", { scope: "row" }, label), series.map((s) => h("td", {}, String(s.values[j]))))))));
    return h("figure", {}, root, h("figcaption", {}, title), legend, table);
  }

  // -- routing --------------------------------------------------------------------

  async function route() {
    const [path, query] = (location.hash.slice(1) || "/people").split("?");
    const params = new URLSearchParams(query || "");
    const parts = path.split("/").filter(Boolean);
    try {
      if (parts[0] === "operations") await operationsPage();
      else if (parts[0] === "health") await healthPage();
      else if (parts[0] === "people" && parts[1]) await personPage(parts[1], parts[2] === "memory" ? "memory" : "conversation", params);
      else await peoplePage(params);
    } catch (err) {
      if (err.status !== 401) show("Problem", h("h1", {}, "Something went wrong"), h("p", { role: "alert" }, err.message));
    }
  }

  document.getElementById("signout").addEventListener("click", guarded(async () => {
    await reach("/admin/session", { method: "DELETE", headers: { "X-CSRF-Token": CSRF } });
    location.assign("/admin/signin");
  }));
  window.addEventListener("hashchange", route);
  route();
})();

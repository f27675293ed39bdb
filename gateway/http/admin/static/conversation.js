// One conversation, merged across channels, live: a socket rings on every change and
// what is new is read by seq from the REST API, so a missed ring costs nothing.
import { api, get } from "./api.js";
import { action, complain, h, onLeave, say, when } from "./dom.js";

const NEWEST = "9007199254740991";
// The only images shown in place: what Parley re-encodes every image it keeps as.
const INLINE_IMAGES = new Set(["image/jpeg", "image/png"]);
const PAGE = 100;

export async function conversation(body, id, focus) {
  const list = h("ol", { class: "messages", "aria-label": "Messages", "aria-live": "polite" });
  const shown = new Map();  // seq -> element
  const urls = [];  // object URLs of files read, freed on leaving
  let lastSeq = 0;
  const text = h("textarea", { id: "operator-text", rows: 2, required: true });
  const send = h("form", { class: "row", onsubmit: async (e) => {
    e.preventDefault();
    try {
      await api("POST", `/sessions/${id}/messages`, { text: text.value });
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
    const parts = [`#${m.seq}`, when(m.created_at), m.role];
    if (m.source) parts.push(`[source: ${m.source}]`);
    if (m.author_name && m.role === "user") parts.push(m.author_name);
    if (m.model) parts.push(`by ${m.model}`);
    const el = h("li", { class: `message ${m.role}`, id: `m${m.seq}`, "data-seq": m.seq, "data-delivery": String(m.delivery) },
      h("header", {}, parts.join(" · "), " ", h("span", { class: "badge" }, m.channel),
        m.delivery && m.delivery !== "sent" ? h("span", { class: `badge ${m.delivery === "failed" ? "bad" : "warn"}` }, m.delivery) : null),
      m.text);
    if (m.attachments.length) el.append(h("ul", { class: "files" }, ...m.attachments.map(file)));
    if (m.delivery === "failed") {
      el.append(h("div", { class: "muted reason" }, m.delivery_error || "the platform refused it"),
        action("Retry delivery", async () => {
          render((await api("POST", `/deliveries/${m.id}/retry`)).data);
          say("Queued to be sent again.");
        }));
    }
    return el;
  }

  // A file as the operator reads it: an image shown, audio played (both only as the
  // types Parley itself keeps them in), anything else only downloaded; each read with
  // the session into an object URL, freed when the page is left.
  function file(a) {
    const what = [a.kind, a.mime, `${a.bytes.toLocaleString()} bytes`];
    if (a.state !== "ready") what.push(a.state);
    const item = h("li", { class: "file" }, h("div", { class: "muted" }, what.join(" · ")));
    if (a.text) item.append(h("div", { class: "file-text" }, a.text));
    if (a.state !== "ready") return item;
    const shown = a.kind === "image" && INLINE_IMAGES.has(a.mime) ? h("img", { alt: a.text || "Image" })
      : a.kind === "audio" && a.mime.startsWith("audio/") ? h("audio", { controls: true }) : null;
    if (shown) { item.prepend(shown); fill(shown, a); }
    item.append(action("Download", () => download(a)));
    return item;
  }

  async function fill(el, a) {
    const url = await blobUrl(a).catch(() => null);
    if (url) el.src = url;
  }

  async function download(a) {
    const url = await blobUrl(a);
    h("a", { href: url, download: a.file_name || `attachment-${a.id}` }).click();
  }

  async function blobUrl(a) {
    const r = await fetch(`/api/v1/attachments/${a.id}`, { credentials: "same-origin" });
    if (!r.ok) throw new Error(`the file could not be read (${r.status})`);
    const url = URL.createObjectURL(await r.blob());
    urls.push(url);
    return url;
  }

  async function page(query) {
    return (await get(`/sessions/${id}/messages?limit=${PAGE}&${query}`)).items;
  }

  async function loadOlder() {
    const first = Math.min(...shown.keys(), Number(NEWEST));
    const items = await page(`before_seq=${first}`);
    items.forEach(render);
    if (items.length < PAGE) older.hidden = true;
  }

  // Everything after the last seq shown, page by page: after a reconnect, nothing missed.
  async function catchUp() {
    for (;;) {
      const items = await page(`after_seq=${lastSeq}`);
      items.forEach(render);
      if (items.length < PAGE) return;
    }
  }

  // One message read again (its delivery moved on), if it is shown.
  async function reread(seq) {
    if (!shown.has(seq)) return;
    (await page(`after_seq=${seq - 1}&limit=1`)).filter((m) => m.seq === seq).forEach(render);
  }

  // On (re)connecting: whatever was new meanwhile, and how the pending replies went.
  async function resync() {
    await catchUp();
    const pending = [...shown].filter(([, el]) => el.dataset.delivery === "pending").map(([seq]) => seq);
    await Promise.all(pending.map(reread));
  }

  (await page(`before_seq=${NEWEST}`)).forEach(render);
  if (shown.size < PAGE) older.hidden = true;
  if (focus) {
    if (!shown.has(focus)) (await page(`after_seq=${focus - 1}&limit=1`)).slice(0, 1).forEach(render);
    const el = shown.get(focus);
    if (el) { el.classList.add("focus"); el.scrollIntoView({ block: "center" }); }
  } else list.lastElementChild && list.lastElementChild.scrollIntoView({ block: "end" });
  // One read at a time, in the order the rings came: a delivery's ring that comes while
  // the message it is about is still being fetched is read after that fetch renders it,
  // instead of being dropped as not shown (and the message left as the fetch found it).
  let reads = Promise.resolve();
  const inTurn = (read) => (...args) => (reads = reads.catch(() => {}).then(() => read(...args)));
  const stop = live(body, id, { changed: inTurn(catchUp), delivery: inTurn(reread), ready: inTurn(resync) });
  onLeave(() => { stop(); urls.forEach((url) => URL.revokeObjectURL(url)); });
}

// The doorbell: a new message rings `changed`, a delivery that moved on `delivery`
// (with its seq); it reconnects with backoff when the socket drops, and `ready` then
// reads whatever was missed.
function live(body, id, on) {
  let socket = null, backoff = 500, stopped = false;
  const status = body.parentElement.querySelector("#live");
  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${proto}//${location.host}/admin/live?session=${id}`);
    socket.onmessage = (e) => {
      const frame = JSON.parse(e.data);
      if (frame.type === "ready") { status.textContent = "live"; backoff = 500; }
      const run = frame.type === "ready" ? on.ready() : frame.type === "changed" ? on.changed()
        : frame.type === "delivery" ? on.delivery(frame.seq) : null;
      if (run) run.catch(complain);
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

(() => {
  const KEY = "parley.webchat.token";
  const log = document.getElementById("log");
  const status = document.getElementById("status");
  const typing = document.getElementById("typing");
  const form = document.getElementById("send");
  const input = document.getElementById("text");
  const picker = document.getElementById("file");
  const previews = document.getElementById("attached");
  const problem = document.getElementById("problem");
  const shown = new Map();  // seq -> element
  const pending = new Map();  // client_id -> { text, files, el }, until the server has stored it
  const MAX_FILES = 10;  // a message's, as the server takes them
  let attached = [];  // { name, img, li, id, uploaded }: the images for the next message
  let lastSeq = 0, seenSeq = 0, unread = -1, socket = null, draft = null, backoff = 500;
  let started = false, typingTimer = 0;
  // History opens at the newest RECENT messages (and any unread); older pages of PAGE are
  // read when the visitor asks, with the button above them. (Not on scrolling to the top:
  // a log still filling up would read pages nobody asked for, and jump.)
  const RECENT = 50, PAGE = 50;
  let firstSeq = 0, reachedStart = false, loadingEarlier = false;
  const earlier = document.createElement("button");
  earlier.type = "button";
  earlier.className = "earlier";
  earlier.textContent = "Earlier messages";
  earlier.hidden = true;
  log.prepend(earlier);

  // In the widget's frame: the page that framed us, if it is one of the allowed origins
  // the server lists, may open, focus and close the chat and identify its user; we tell it
  // how many messages are unread and that messages arrived (never their text).
  const framed = window.parent !== window;
  const hosts = (document.querySelector('meta[name="parley-hosts"]')?.content || "").split(" ");
  const wanted = new URLSearchParams(location.hash.slice(1));
  // Where ancestorOrigins is missing (Firefox) and the host sends no referrer, the loader's
  // word for its origin: a false one gains nothing, as the browser delivers our messages
  // only to that origin and we take theirs only from it.
  const parentOrigin = !framed ? "" :
    (location.ancestorOrigins && location.ancestorOrigins[0]) ||
    (document.referrer ? new URL(document.referrer).origin : wanted.get("host") || "");
  const trusted = parentOrigin !== "" &&
    (parentOrigin === location.origin || hosts.includes(parentOrigin));
  let isOpen = !framed;

  function tellHost(type, fields) {
    if (trusted) window.parent.postMessage({ type, ...fields }, parentOrigin);
  }

  // The token lives in this frame's own storage. A browser that gives a framed page none
  // (third-party storage blocked) leaves two places: the host page's storage, through the
  // loader, when it is framed by an allowed site; else memory, for this page view only.
  const own = (() => {
    try {
      localStorage.setItem(KEY + ".probe", "1");
      localStorage.removeItem(KEY + ".probe");
      return localStorage;
    } catch (e) {
      return null;
    }
  })();
  let kept = null;
  const store = {
    get: () => (own ? own.getItem(KEY) : kept),
    set(token) {
      if (own) own.setItem(KEY, token);
      else { kept = token; tellHost("parley:keep", { token }); }
    },
    clear() {
      if (own) own.removeItem(KEY);
      else { kept = null; tellHost("parley:keep", { token: null }); }
    },
  };
  document.documentElement.dataset.storage = own ? "frame" : trusted ? "host" : "memory";

  if (trusted) {
    // The site's title and greeting for its chat, and a way to close it where there is
    // no Escape key.
    const header = document.querySelector("header");
    if (wanted.get("title")) document.getElementById("title").textContent = wanted.get("title");
    if (wanted.get("greeting")) {
      const greeting = document.createElement("p");
      greeting.className = "greeting";
      greeting.textContent = wanted.get("greeting");
      log.before(greeting);
    }
    const close = document.createElement("button");
    close.type = "button";
    close.className = "close";
    close.textContent = "×";
    close.setAttribute("aria-label", "Close chat");
    close.addEventListener("click", () => tellHost("parley:close", {}));
    header.appendChild(close);
  }

  window.addEventListener("message", (e) => {
    if (!trusted || e.source !== window.parent || e.origin !== parentOrigin || !e.data) return;
    const { type } = e.data;
    if (type === "parley:init") {
      if (!own && kept === null && typeof e.data.token === "string") kept = e.data.token;
      isOpen = e.data.open === true;
      // A returning visitor connects at once (their unread count); a new one only once
      // they open the chat, so a page view alone stores nothing anywhere.
      if (isOpen || store.get()) start();
    } else if (type === "parley:open") {
      isOpen = true;
      input.focus();
      start();
      refreshUnread();
    } else if (type === "parley:close") {
      isOpen = false;
    } else if (type === "parley:identify") {
      identify(String(e.data.token)).catch((err) => note("Sign-in failed: " + err.message));
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") tellHost("parley:close", {});
  });
  document.addEventListener("visibilitychange", refreshUnread);

  // The site's user: their own conversation from now on (the token is kept like ours).
  // A connection starting meanwhile waits for it, so it never starts as a stranger.
  let signingIn = Promise.resolve();
  function identify(identityToken) {
    signingIn = signIn(identityToken);
    return signingIn;
  }

  async function signIn(identityToken) {
    const r = await fetch("/webchat/identify", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ identity_token: identityToken }),
    });
    const body = await r.json();
    if (!r.ok) {
      const why = typeof body.detail === "string" ? body.detail : "the token was refused";
      note("Sign-in refused: " + why);
      return;
    }
    if (store.get() === body.token) return;
    forget();
    store.set(body.token);
    if (!started) start();
    else if (socket) { status.textContent = "signing in…"; socket.close(); }  // reconnects as them
  }

  async function token() {
    await signingIn.catch(() => {});
    let t = store.get();
    if (t) return t;
    const r = await fetch("/webchat/sessions", { method: "POST" });
    if (!r.ok) throw new Error("could not start a session");
    t = (await r.json()).token;
    await signingIn.catch(() => {});
    if (store.get()) return store.get();  // signed in meanwhile: theirs, not a stranger's
    store.set(t);
    return t;
  }

  function bubble(cls) {
    const el = document.createElement("div");
    el.className = "msg " + cls;
    log.appendChild(el);
    return el;
  }

  function note(text) {
    bubble("event").textContent = text;
    log.scrollTop = log.scrollHeight;
  }

  // `older`: read back on demand, placed above what is shown without scrolling or noise.
  function show(m, older) {
    // The server sends stored messages in seq order without gaps: the last one it sent is
    // where a reconnect resumes. (Not an ack's seq: an ack may overtake a message before it.)
    if (!older) lastSeq = Math.max(lastSeq, m.seq);
    if (shown.has(m.seq)) return;
    if (m.role !== "user" && !older) { stopTyping(); if (draft) { draft.remove(); draft = null; } }
    const el = bubble(m.role);
    el.dataset.seq = m.seq;
    if (m.role === "assistant") el.append(window.ParleyMarkdown.render(m.text));
    else el.textContent = m.text;
    const images = m.attachments.filter((a) => a.kind === "image");
    if (images.length) el.prepend(pictures(images.map(fetched)));
    if (m.channel !== "webchat") {
      const via = document.createElement("span");
      via.className = "via";
      via.textContent = "via " + m.channel;
      el.appendChild(via);
    }
    // Unread if the visitor did not write it here themselves.
    if (m.role !== "user" || m.channel !== "webchat") el.dataset.other = "";
    place(el, m.seq, m.role, older);
  }

  function pictures(imgs) {
    const box = document.createElement("div");
    box.className = "pics";
    box.append(...imgs);
    return box;
  }

  // The file answers only to the visitor's token, so it is read here, not by the <img>.
  function fetched(a) {
    const img = document.createElement("img");
    img.alt = a.text || "Image";
    load(img, a.id).catch(() => {});  // left as its alt text
    return img;
  }

  async function load(img, id) {
    const r = await fetch(`/webchat/attachments/${id}`, {
      headers: { Authorization: "Bearer " + (await token()) },
    });
    if (!r.ok) return;
    const blob = await r.blob();
    // Gone meanwhile (the log cleared): a URL made now would never be revoked.
    if (img.isConnected) img.src = URL.createObjectURL(blob);
  }

  // An object URL lasts as long as its image is on the page: whatever takes one away
  // (a removed preview, a bubble replaced, the log cleared) frees it here. An image moved
  // elsewhere (from a preview into its message and back) is on the page again by now.
  new MutationObserver((records) => {
    for (const r of records) {
      for (const node of r.removedNodes) {
        if (node.isConnected || !node.querySelectorAll) continue;
        for (const img of node.tagName === "IMG" ? [node] : node.querySelectorAll("img")) {
          if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
        }
      }
    }
  }).observe(document.body, { childList: true, subtree: true });

  // Keep seq order even if a message arrives late; unsent messages stay last.
  function place(el, seq, role, older) {
    const later = [...shown.entries()].filter(([s]) => s > seq).sort((a, b) => a[0] - b[0])[0];
    const firstPending = [...pending.values()].find((p) => p.el !== el && p.el.isConnected);
    if (later) log.insertBefore(el, later[1]);
    else if (firstPending) log.insertBefore(el, firstPending.el);
    shown.set(seq, el);
    firstSeq = firstSeq ? Math.min(firstSeq, seq) : seq;
    earlier.hidden = reachedStart || firstSeq <= 1;
    if (older) return;
    log.scrollTop = log.scrollHeight;
    tellHost("parley:event", { event: "message", data: { seq, role } });
    refreshUnread();
  }

  // One page of the messages before the first one shown, keeping the view where it was.
  async function loadEarlier() {
    if (loadingEarlier || earlier.hidden) return;
    loadingEarlier = true;
    try {
      const r = await fetch(`/webchat/messages?before_seq=${firstSeq}&limit=${PAGE}`, {
        headers: { Authorization: "Bearer " + (await token()) },
      });
      if (!r.ok) throw new Error("earlier messages could not be read");
      const { messages } = await r.json();
      const fromBottom = log.scrollHeight - log.scrollTop;
      log.setAttribute("aria-busy", "true");  // not announced as if new
      if (messages.length < PAGE) reachedStart = true;
      messages.forEach((m) => show(m, true));
      earlier.hidden = reachedStart || firstSeq <= 1;
      if (earlier.hidden && document.activeElement === earlier) log.focus();
      log.scrollTo({ top: log.scrollHeight - fromBottom, behavior: "instant" });
      log.removeAttribute("aria-busy");
    } catch (err) {
      note(err.message);
    } finally {
      loadingEarlier = false;
    }
  }
  earlier.addEventListener("click", loadEarlier);

  function stored(clientId, seq) {
    const p = pending.get(clientId);
    if (!p) return;
    pending.delete(clientId);
    if (shown.has(seq)) { p.el.remove(); return; }  // the stored message came first
    p.el.removeAttribute("data-state");
    p.el.dataset.seq = seq;
    place(p.el, seq, "user");
  }

  // The model is asked (again, after looking something up: what it wrote before was
  // not the answer).
  function startTyping() {
    if (draft) { draft.remove(); draft = null; }
    typing.hidden = false;
    clearTimeout(typingTimer);
    typingTimer = setTimeout(stopTyping, 120000);  // a reply that never came (a crash)
  }

  function stopTyping() {
    typing.hidden = true;
    clearTimeout(typingTimer);
  }

  // What the visitor has read (everything, while the chat is open in a visible page)
  // goes to the server; the rest is the launcher's unread count.
  function refreshUnread() {
    if (isOpen && document.visibilityState === "visible" && lastSeq > seenSeq) {
      seenSeq = lastSeq;
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "seen", seq: seenSeq }));
    }
    const count = [...shown.entries()].filter(([s, el]) => s > seenSeq && "other" in el.dataset).length;
    if (count !== unread) tellHost("parley:unread", { count });
    unread = count;
  }

  function start() {
    if (started) return;
    started = true;
    connect().catch(failed);
  }

  async function connect() {
    const t = await token();
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${proto}//${location.host}/webchat/ws`);
    socket = ws;
    ws.onopen = () => {
      // The token travels in the first frame, never in the URL (which servers log).
      ws.send(JSON.stringify({ type: "auth", token: t }));
      // A first connection asks for the recent history only; a later one for all it missed.
      const resume = { type: "resume", after_seq: lastSeq };
      if (lastSeq === 0) resume.recent = RECENT;
      ws.send(JSON.stringify(resume));
      // Messages the last socket may not have delivered: the server stores each once.
      for (const [id, p] of pending) sendFrame(ws, id, p);
    };
    ws.onmessage = (e) => {
      const f = JSON.parse(e.data);
      if (f.type === "ready") {
        status.textContent = "online";
        backoff = 500;
        seenSeq = Math.max(seenSeq, f.seen_seq);
        refreshUnread();
      } else if (f.type === "message") show(f);
      else if (f.type === "ack") stored(f.client_id, f.seq);
      else if (f.type === "typing") startTyping();
      else if (f.type === "delta") {
        stopTyping();
        if (!draft) {
          draft = bubble("assistant draft");
          draft.setAttribute("aria-hidden", "true");  // announced once, when stored
        }
        draft.textContent += f.text;
        log.scrollTop = log.scrollHeight;
      } else if (f.type === "ended") {
        // The conversation is gone (erased, or deleted by an operator): what was shown
        // goes, and the page stays quiet until the visitor writes again.
        socket = null;
        started = false;
        status.textContent = "closed";
        clearShown();
        note(f.text);
        refreshUnread();  // nothing is left unread
      } else if (f.type === "error" && f.code === "expired") signedOut();
      else if (f.type === "error") {
        if (f.code === "unauthorized") forget();
        note(f.detail);
        giveBack(f.client_id);
      }
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      status.textContent = "reconnecting…";
      // Deltas sent while away are lost: the stored reply comes with the resume instead.
      stopTyping();
      if (draft) { draft.remove(); draft = null; }
      retry();
    };
  }

  // The site's sign-in has run out (the server closes the socket with it). What was shown
  // was that person's and goes; the site is told (the widget's "expired" event) so it can
  // identify() them again, and until it does, or the visitor writes, nothing connects:
  // a new session started now would be a stranger's. Messages not yet stored stay.
  function signedOut() {
    socket = null;
    started = false;
    status.textContent = "signed out";
    forget();
    note("Your sign-in has expired.");
    refreshUnread();
    tellHost("parley:event", { event: "expired" });
  }

  // The token no longer works (say the secret key changed): the next connection starts a new
  // conversation, numbered from seq 1 again, so nothing shown so far may stand in for it.
  // Messages not yet stored stay, to be sent there.
  function forget() {
    store.clear();
    clearShown();
  }

  function clearShown() {
    stopTyping();
    log.replaceChildren(earlier, ...[...pending.values()].map((p) => p.el));
    shown.clear();
    lastSeq = seenSeq = firstSeq = 0;
    reachedStart = false;
    earlier.hidden = true;
    draft = null;
  }

  function sendFrame(ws, clientId, p) {
    const attachments = p.files.map((a) => a.id);
    ws.send(JSON.stringify({ type: "message", text: p.text, client_id: clientId, attachments }));
  }

  // A message the server refused goes back into the box, so nothing typed is lost;
  // unless something new is being typed there, which must not be overwritten. Its
  // images go back among those to send.
  function giveBack(clientId) {
    const p = pending.get(clientId);
    if (!p) return;
    pending.delete(clientId);
    p.el.remove();
    if (input.value === "") input.value = p.text;
    for (const a of p.files) if (attached.length < MAX_FILES) preview(a);
  }

  // Every failure to connect, including failing to start a session, tries again later.
  function retry() {
    setTimeout(() => connect().catch(failed), backoff);
    backoff = Math.min(backoff * 2, 10000);
  }

  function failed(err) {
    status.textContent = err.message;
    retry();
  }

  // Images: each is uploaded as soon as it is chosen, shown meanwhile from the visitor's
  // own copy; a refused one goes, with a word why, and nothing else does.
  const REFUSED = {
    413: "That file is too large.",
    415: "Only images can be sent (JPEG, PNG, WebP or GIF).",
    422: "That image could not be read.",
    429: "Too many uploads: wait a minute and try again.",
  };
  const accepted = picker.accept.split(",");

  function warn(text) {
    problem.textContent = text;
    problem.hidden = !text;
  }

  function attach(files) {
    warn("");
    for (const file of files) {
      if (attached.length >= MAX_FILES) { warn(`At most ${MAX_FILES} images a message.`); return; }
      if (!accepted.includes(file.type)) { warn(REFUSED[415]); continue; }
      const img = document.createElement("img");
      img.src = URL.createObjectURL(file);
      const a = { name: file.name || "image", img, id: 0 };
      preview(a);
      a.uploaded = upload(a, file);
    }
  }

  function preview(a) {
    a.img.alt = a.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "remove";
    remove.textContent = "×";
    remove.setAttribute("aria-label", "Remove " + a.name);
    remove.addEventListener("click", () => { unattach(a); input.focus(); });
    a.li = document.createElement("li");
    a.li.append(a.img, remove);
    previews.append(a.li);
    attached.push(a);
    previews.hidden = false;
  }

  function unattach(a) {
    attached = attached.filter((b) => b !== a);
    a.li.remove();
    previews.hidden = attached.length === 0;
  }

  async function upload(a, file) {
    a.li.dataset.state = "uploading";
    const body = new FormData();
    body.append("file", file);
    const send = (t) => fetch("/webchat/uploads", {
      method: "POST",
      headers: { Authorization: "Bearer " + t },
      body,
    });
    const r = await token().then(send).catch(() => null);  // offline, or no session: said below
    if (r && r.ok) {
      a.id = (await r.json()).attachment_id;
      delete a.li.dataset.state;
    } else if (attached.includes(a)) {
      unattach(a);
      warn(REFUSED[r && r.status] || "That image could not be uploaded: try again.");
    }
  }

  document.getElementById("attach").addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    attach([...picker.files]);
    picker.value = "";  // the same file may be chosen again
  });
  input.addEventListener("paste", (e) => {
    const files = [...e.clipboardData.files];
    if (!files.length) return;
    // A picture copied from a page may come with words of its own; a bare one is no text.
    if (!e.clipboardData.types.includes("text/plain")) e.preventDefault();
    attach(files);
  });
  // Files dropped anywhere on the chat are attached, never opened in its place.
  document.addEventListener("dragover", (e) => {
    if (!e.dataTransfer.types.includes("Files")) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    document.body.classList.add("dropping");
  });
  document.addEventListener("dragleave", (e) => {
    if (!e.relatedTarget) document.body.classList.remove("dropping");  // left the page
  });
  document.addEventListener("drop", (e) => {
    document.body.classList.remove("dropping");
    if (!e.dataTransfer.files.length) return;
    e.preventDefault();
    attach([...e.dataTransfer.files]);
  });

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // An image still uploading goes with this message: it waits for it.
    await Promise.all(attached.map((a) => a.uploaded));
    const text = input.value;
    const files = attached.filter((a) => a.id);
    if (!text.trim() && !files.length) return;
    start();
    const raw = (crypto.randomUUID && crypto.randomUUID()) || String(Date.now()) + Math.random();
    const id = raw.replace(/[^\w.:-]/g, "");
    // Shown at once as sending; it becomes the stored message when the server says so,
    // and is sent again after a reconnect until then. Its images move from the previews
    // into it, already loaded.
    const el = bubble("user");
    el.textContent = text;
    if (files.length) {
      el.prepend(pictures(files.map((a) => a.img)));
      for (const a of files) { a.img.alt = "Image"; unattach(a); }
    }
    el.dataset.state = "sending";
    const p = { text, files, el };
    pending.set(id, p);
    log.scrollTop = log.scrollHeight;
    if (socket && socket.readyState === WebSocket.OPEN) sendFrame(socket, id, p);
    input.value = "";
    warn("");
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  if (!framed) start();
  else tellHost("parley:hello", { storage: own !== null });
})();

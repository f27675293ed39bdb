(() => {
  const KEY = "parley.webchat.token";
  const log = document.getElementById("log");
  const status = document.getElementById("status");
  const form = document.getElementById("send");
  const input = document.getElementById("text");
  const shown = new Map();  // seq -> element
  const unacked = new Map();  // client_id -> text, until the server has stored it
  let lastSeq = 0, socket = null, draft = null, backoff = 500;

  // In the widget's frame: the page that framed us, if it is one of the allowed origins
  // the server lists, may focus the box and identify its user; we tell it when messages
  // arrive (never their text) and when Escape asks to close.
  const hosts = (document.querySelector('meta[name="parley-hosts"]')?.content || "").split(" ");
  const parentOrigin = window.parent === window ? "" :
    (location.ancestorOrigins && location.ancestorOrigins[0]) ||
    (document.referrer ? new URL(document.referrer).origin : "");
  const trusted = parentOrigin !== "" &&
    (parentOrigin === location.origin || hosts.includes(parentOrigin));

  function tellHost(type, fields) {
    if (trusted) window.parent.postMessage({ type, ...fields }, parentOrigin);
  }

  if (trusted) {
    // The site's title for its chat, and a way to close it where there is no Escape key.
    const header = document.querySelector("header");
    if (location.hash.length > 1) header.firstChild.textContent = decodeURIComponent(location.hash.slice(1)) + " ";
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
    if (e.data.type === "parley:focus") input.focus();
    else if (e.data.type === "parley:identify") identify(String(e.data.token)).catch(failed);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") tellHost("parley:close", {});
  });

  // The site's user: their own conversation from now on (the token is kept like ours).
  async function identify(identityToken) {
    const r = await fetch("/webchat/identify", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ identity_token: identityToken }),
    });
    const body = await r.json();
    if (!r.ok) {
      const why = typeof body.detail === "string" ? body.detail : "the token was refused";
      bubble("event").textContent = "Sign-in refused: " + why;
      return;
    }
    if (localStorage.getItem(KEY) === body.token) return;
    forget();
    localStorage.setItem(KEY, body.token);
    status.textContent = "signing in…";
    if (socket) socket.close();  // reconnects as them
  }

  async function token() {
    let t = localStorage.getItem(KEY);
    if (t) return t;
    const r = await fetch("/webchat/sessions", { method: "POST" });
    if (!r.ok) throw new Error("could not start a session");
    t = (await r.json()).token;
    localStorage.setItem(KEY, t);
    return t;
  }

  function bubble(cls) {
    const el = document.createElement("div");
    el.className = "msg " + cls;
    log.appendChild(el);
    return el;
  }

  function show(m) {
    if (shown.has(m.seq)) return;
    if (m.role !== "user" && draft) { draft.remove(); draft = null; }
    const el = bubble(m.role);
    el.dataset.seq = m.seq;
    if (m.role === "assistant") el.append(window.ParleyMarkdown.render(m.text));
    else el.textContent = m.text;
    if (m.channel !== "webchat") {
      const via = document.createElement("span");
      via.className = "via";
      via.textContent = "via " + m.channel;
      el.appendChild(via);
    }
    // Keep seq order even if a message arrives late.
    const later = [...shown.entries()].filter(([s]) => s > m.seq).sort((a, b) => a[0] - b[0])[0];
    if (later) log.insertBefore(el, later[1]);
    shown.set(m.seq, el);
    lastSeq = Math.max(lastSeq, m.seq);
    tellHost("parley:event", { event: "message", data: { seq: m.seq, role: m.role } });
    log.scrollTop = log.scrollHeight;
  }

  async function connect() {
    const t = await token();
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${proto}//${location.host}/webchat/ws?token=${encodeURIComponent(t)}`);
    socket.onopen = () => {
      status.textContent = "online";
      backoff = 500;
      socket.send(JSON.stringify({ type: "resume", after_seq: lastSeq }));
    };
    socket.onmessage = (e) => {
      const f = JSON.parse(e.data);
      if (f.type === "message") show(f);
      else if (f.type === "ack") unacked.delete(f.client_id);
      else if (f.type === "delta") {
        draft = draft || bubble("assistant draft");
        draft.textContent += f.text;
        log.scrollTop = log.scrollHeight;
      } else if (f.type === "error") {
        if (f.code === "unauthorized") forget();
        bubble("event").textContent = f.detail;
        giveBack(f.client_id);
      }
    };
    socket.onclose = () => {
      status.textContent = "reconnecting…";
      retry();
    };
  }

  // The token no longer works (say the secret key changed): the next connection starts a new
  // conversation, numbered from seq 1 again, so nothing shown so far may stand in for it.
  function forget() {
    localStorage.removeItem(KEY);
    log.replaceChildren();
    shown.clear();
    lastSeq = 0;
    draft = null;
  }

  // A message the server refused goes back into the box, so nothing typed is lost;
  // unless something new is being typed there, which must not be overwritten.
  function giveBack(clientId) {
    if (!unacked.has(clientId)) return;
    const text = unacked.get(clientId);
    unacked.delete(clientId);
    if (input.value === "") input.value = text;
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

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = input.value;
    if (!text.trim() || !socket || socket.readyState !== WebSocket.OPEN) return;
    const raw = (crypto.randomUUID && crypto.randomUUID()) || String(Date.now()) + Math.random();
    const id = raw.replace(/[^\w.:-]/g, "");
    unacked.set(id, text);
    socket.send(JSON.stringify({ type: "message", text, client_id: id }));
    input.value = "";
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  connect().catch(failed);
})();

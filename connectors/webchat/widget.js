// Parley's web chat on any page: <script src="https://parley.example/webchat/widget.js" async></script>
// A launcher button, and the chat in an iframe served from Parley's own origin, so the
// host page's styles and scripts can reach neither the panel nor the visitor's token.
// Options: data-title, data-greeting, data-color, data-position ("right" | "left"), data-open.
// API: window.Parley.open(), .close(), .identify(token), .on(event, fn); calls made
// before this script has loaded wait in window.Parley.q (see the README's snippet).
// Events: "open", "close", "message" ({seq, role}), "unread" ({count}), "expired" (the
// sign-in given by identify() ran out: identify() again with a fresh token).
(() => {
  const script = document.currentScript;
  if (!script || window.Parley && window.Parley.loaded) return;
  const base = new URL(script.src).origin;
  const options = script.dataset;
  const title = options.title || "Chat";
  const color = /^#([0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/i.test(options.color || "") ? options.color : "#2563eb";
  const side = options.position === "left" ? "left" : "right";
  // The icon in white, or in near-black on a light colour, whichever reads better on it.
  const ink = contrast(color, "#ffffff") >= contrast(color, "#111111") ? "#fff" : "#111";
  // Where the token is kept only if the browser gives the frame no storage of its own.
  const KEPT = "parley.webchat.token@" + base;
  const listeners = {};
  let unread = 0;

  // A closed shadow root: the host's CSS cannot restyle the launcher, nor its scripts find
  // it. Styles go through the CSSOM, which a host's Content-Security-Policy allows.
  const host = document.createElement("div");
  for (const [name, value] of [["all", "initial"], ["position", "fixed"], ["z-index", "2147483647"], ["bottom", "0"], [side, "0"]]) {
    host.style.setProperty(name, value, "important");
  }
  const root = host.attachShadow({ mode: "closed" });
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(`
    :host { all: initial; }
    .launcher { all: initial; box-sizing: border-box; position: fixed; bottom: 16px; ${side}: 16px;
      width: 56px; height: 56px; border-radius: 50%; background: ${color}; color: ${ink};
      font: 600 24px/56px system-ui, sans-serif; text-align: center; cursor: pointer;
      box-shadow: 0 2px 10px #0005; }
    .launcher:focus-visible { outline: 3px solid ${ink}; outline-offset: -6px; box-shadow: 0 0 0 3px ${color}; }
    .launcher svg { vertical-align: middle; }
    .badge { position: absolute; top: -4px; ${side === "right" ? "left" : "right"}: -4px; min-width: 20px;
      height: 20px; padding: 0 5px; box-sizing: border-box; border-radius: 10px; background: #b91c1c;
      color: #fff; font: 700 12px/20px system-ui, sans-serif; text-align: center; }
    .badge[hidden], .panel[hidden] { display: none; }
    .panel { all: initial; position: fixed; bottom: 84px; ${side}: 16px; width: 380px;
      height: min(600px, calc(100vh - 100px)); border-radius: 12px; overflow: hidden;
      box-shadow: 0 4px 24px #0006; background: #fff; }
    iframe { all: initial; display: block; width: 100%; height: 100%; border: 0; }
    @media (prefers-color-scheme: dark) { .panel { background: #16181d; } }
    @media (prefers-reduced-motion: no-preference) {
      .panel:not([hidden]) { animation: rise .15s ease-out; }
      @keyframes rise { from { opacity: 0; transform: translateY(8px); } }
    }
    @media (max-width: 480px) { .panel { left: 0; right: 0; bottom: 0; width: 100vw; height: 100vh; border-radius: 0; } }
  `);
  root.adoptedStyleSheets = [sheet];
  const launcher = document.createElement("button");
  launcher.type = "button";
  launcher.className = "launcher";
  launcher.setAttribute("aria-haspopup", "dialog");
  launcher.setAttribute("aria-expanded", "false");
  launcher.setAttribute("aria-controls", "parley-panel");
  // A speech bubble drawn inline: no font or file to fetch.
  const svg = new DOMParser().parseFromString('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="26" height="26" aria-hidden="true"><path fill="currentColor" d="M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z"/></svg>', "image/svg+xml").documentElement;
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.hidden = true;
  badge.setAttribute("aria-hidden", "true");
  launcher.append(svg, badge);
  const panel = document.createElement("div");
  panel.className = "panel";
  panel.id = "parley-panel";
  panel.hidden = true;
  panel.setAttribute("role", "dialog");
  panel.setAttribute("aria-label", title);
  const frame = document.createElement("iframe");
  frame.title = title;
  const wanted = new URLSearchParams({ title, host: location.origin });
  if (options.greeting) wanted.set("greeting", options.greeting);
  frame.src = base + "/webchat/frame#" + wanted;
  panel.append(frame);
  root.append(launcher, panel);

  // WCAG's contrast ratio of two colours written #rgb, #rrggbb (or with alpha, ignored).
  function contrast(a, b) {
    const [la, lb] = [a, b].map(luminance).sort((x, y) => y - x);
    return (la + 0.05) / (lb + 0.05);
  }

  function luminance(hex) {
    const h = hex.length < 7 ? [...hex.slice(1, 4)].map((c) => c + c).join("") : hex.slice(1, 7);
    const [r, g, b] = [0, 2, 4].map((i) => {
      const c = parseInt(h.slice(i, i + 2), 16) / 255;
      return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }

  function emit(event, data) {
    for (const fn of listeners[event] || []) {
      try { fn(data); } catch (err) { console.error(err); }
    }
  }

  // Until the frame says it has started, what we tell it waits here: a message posted to
  // a frame still loading is dropped by the browser (its origin is not yet Parley's).
  let waiting = [];
  function tell(type, fields) {
    if (waiting) waiting.push({ type, ...fields });
    else frame.contentWindow.postMessage({ type, ...fields }, base);
  }

  function label() {
    const verb = panel.hidden ? "Open " : "Close ";
    launcher.setAttribute("aria-label", verb + title + (unread ? ` (${unread} unread)` : ""));
    badge.textContent = unread > 99 ? "99+" : String(unread);
    badge.hidden = unread === 0;
  }

  function open() {
    if (!panel.hidden) return;
    panel.hidden = false;
    launcher.setAttribute("aria-expanded", "true");
    label();
    tell("parley:open", {});
    emit("open");
  }

  function close() {
    if (panel.hidden) return;
    panel.hidden = true;
    launcher.setAttribute("aria-expanded", "false");
    label();
    tell("parley:close", {});
    launcher.focus();
    emit("close");
  }

  launcher.addEventListener("click", () => (panel.hidden ? open() : close()));

  function keep(token) {
    try {
      if (typeof token === "string") localStorage.setItem(KEPT, token);
      else localStorage.removeItem(KEPT);
    } catch (err) { /* no storage here either: the chat lasts this page view */ }
  }

  function kept() {
    try { return localStorage.getItem(KEPT); } catch (err) { return null; }
  }

  // Only the frame, from Parley's origin, speaks to us.
  window.addEventListener("message", (e) => {
    if (e.origin !== base || e.source !== frame.contentWindow || !e.data) return;
    const { type } = e.data;
    if (type === "parley:hello") {
      // The frame has started: what was asked of it meanwhile (an identify before it starts
      // a visitor's session), then our copy of the token, only if it has no storage.
      const early = waiting || [];
      waiting = null;
      for (const message of early) tell(message.type, message);
      tell("parley:init", { open: !panel.hidden, token: e.data.storage ? undefined : kept() });
    } else if (type === "parley:keep") keep(e.data.token);
    else if (type === "parley:close") close();
    else if (type === "parley:unread") {
      unread = Math.max(0, Number(e.data.count) || 0);
      label();
      emit("unread", { count: unread });
    } else if (type === "parley:event") emit(e.data.event, e.data.data);
  });

  const api = {
    loaded: true,
    open,
    close,
    identify(token) {
      tell("parley:identify", { token: String(token) });
    },
    on(event, fn) {
      (listeners[event] = listeners[event] || []).push(fn);
    },
  };
  const queued = (window.Parley && window.Parley.q) || [];
  window.Parley = api;
  label();
  (document.body || document.documentElement).appendChild(host);
  for (const [name, ...args] of queued) if (typeof api[name] === "function") api[name](...args);
  if (options.open !== undefined && options.open !== "false") open();
})();

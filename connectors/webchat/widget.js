// Parley's web chat on any page: <script src="https://parley.example/webchat/widget.js" async></script>
// A launcher button, and the chat in an iframe served from Parley's own origin, so the
// host page's styles and scripts can reach neither the panel nor the visitor's token.
// Options: data-title, data-color, data-position ("right" | "left"), data-open.
// API: window.Parley.open(), .close(), .identify(token), .on(event, fn); calls made
// before this script has loaded wait in window.Parley.q (see the README's snippet).
(() => {
  const script = document.currentScript;
  if (!script || window.Parley && window.Parley.loaded) return;
  const base = new URL(script.src).origin;
  const options = script.dataset;
  const title = options.title || "Chat";
  const color = /^#[0-9a-fA-F]{3,8}$/.test(options.color || "") ? options.color : "#2563eb";
  const side = options.position === "left" ? "left" : "right";
  const listeners = {};

  // A closed shadow root: the host's CSS cannot restyle the launcher, nor its scripts find it.
  const host = document.createElement("div");
  host.setAttribute("style", "all: initial !important; position: fixed !important; z-index: 2147483647 !important; bottom: 0 !important; " + side + ": 0 !important;");
  const root = host.attachShadow({ mode: "closed" });
  root.innerHTML = `<style>
    :host { all: initial; }
    button { all: initial; box-sizing: border-box; position: fixed; bottom: 16px; ${side}: 16px;
      width: 56px; height: 56px; border-radius: 50%; background: ${color}; color: #fff;
      font: 600 24px/56px system-ui, sans-serif; text-align: center; cursor: pointer;
      box-shadow: 0 2px 10px #0005; }
    button:focus-visible { outline: 3px solid #fff; outline-offset: -6px; }
    iframe { all: initial; position: fixed; bottom: 84px; ${side}: 16px; width: 380px;
      height: min(600px, calc(100vh - 100px)); border: 0; border-radius: 12px;
      box-shadow: 0 4px 24px #0006; background: #fff; }
    iframe[hidden] { display: none; }
    @media (max-width: 480px) { iframe { left: 0; right: 0; bottom: 0; width: 100vw; height: 100vh; border-radius: 0; } }
  </style>
  <button type="button" aria-haspopup="dialog" aria-expanded="false"></button>
  <iframe hidden></iframe>`;
  const launcher = root.querySelector("button");
  const frame = root.querySelector("iframe");
  // A speech bubble drawn inline: no font or file to fetch.
  launcher.innerHTML = '<svg viewBox="0 0 24 24" width="26" height="26" aria-hidden="true" style="vertical-align: middle"><path fill="currentColor" d="M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z"/></svg>';
  launcher.setAttribute("aria-label", "Open " + title);
  frame.title = title;
  frame.src = base + "/webchat/frame#" + encodeURIComponent(title);

  function emit(event, data) {
    for (const fn of listeners[event] || []) {
      try { fn(data); } catch (err) { console.error(err); }
    }
  }

  function open() {
    frame.hidden = false;
    launcher.setAttribute("aria-expanded", "true");
    launcher.setAttribute("aria-label", "Close " + title);
    frame.contentWindow && frame.contentWindow.postMessage({ type: "parley:focus" }, base);
    emit("open");
  }

  function close() {
    frame.hidden = true;
    launcher.setAttribute("aria-expanded", "false");
    launcher.setAttribute("aria-label", "Open " + title);
    launcher.focus();
    emit("close");
  }

  launcher.addEventListener("click", () => (frame.hidden ? open() : close()));

  // Only the frame, from Parley's origin, speaks to us.
  window.addEventListener("message", (e) => {
    if (e.origin !== base || e.source !== frame.contentWindow || !e.data) return;
    if (e.data.type === "parley:close") close();
    else if (e.data.type === "parley:event") emit(e.data.event, e.data.data);
  });

  const api = {
    loaded: true,
    open,
    close,
    identify(token) {
      frame.contentWindow.postMessage({ type: "parley:identify", token: String(token) }, base);
    },
    on(event, fn) {
      (listeners[event] = listeners[event] || []).push(fn);
    },
  };
  const queued = (window.Parley && window.Parley.q) || [];
  window.Parley = api;
  (document.body || document.documentElement).appendChild(host);
  frame.addEventListener("load", () => {
    for (const [name, ...args] of queued) if (typeof api[name] === "function") api[name](...args);
    if (options.open !== undefined && options.open !== "false") open();
  }, { once: true });
})();

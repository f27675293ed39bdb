// Building blocks of the dashboard's pages: elements built from text (nothing a person,
// a model or a platform wrote becomes markup), the toast, buttons that run an action,
// and showing a page in place of the last.
const view = document.getElementById("view");
const toast = document.getElementById("toast");
let leaving = () => {};  // what the current page stops when another is shown
let again = () => {};  // shows the current route afresh (set by the router)

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), guarded(value));
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined));
  return el;
}

// A notice belongs to the page it was said on (its route): it goes when another page is
// shown, not over that page's content. A page shown again (after an action) keeps it; an
// action that moves to another page says its notice once it has moved.
let noticeRoute = null;

export function say(text) {
  toast.textContent = text;
  noticeRoute = location.hash;
  clearTimeout(say.timer);
  say.timer = setTimeout(unsay, 5000);
}

function unsay() {
  toast.textContent = "";
  clearTimeout(say.timer);
}

// The router is about to show the current route: a notice of another page goes.
export function arrive() {
  if (noticeRoute !== location.hash) unsay();
}

// What went wrong, said in the toast (unless it belongs to a page no longer shown).
export function complain(err) {
  if (!err.stale) say(err.message);
}

// An event handler whose failure is said in the toast, not left as an uncaught error.
export function guarded(handler) {
  return async (event) => {
    try { await handler(event); } catch (err) { complain(err); }
  };
}

export function when(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

// Run an action from a button: disabled while it runs, its outcome said aloud.
export function action(label, run, cls) {
  const button = h("button", { type: "button", class: cls }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try { await run(); } catch (err) { complain(err); } finally { button.disabled = false; }
  });
  return button;
}

export function show(title, ...content) {
  leaving();
  leaving = () => {};
  document.title = title + " · Parley";
  view.replaceChildren(...content);
  view.focus();
}

// What to stop (a live socket) when the page shown now is left.
export function onLeave(stop) { leaving = stop; }

export function setRefresh(route) { again = route; }

// Show the current page again, as it is now (after a change made from it).
export function refresh() { return again(); }

// A wide table scrolls inside its own box on a narrow screen, not the page; the box
// takes the focus, so a keyboard can scroll it.
export function scroller(table) { return h("div", { class: "scroll", tabindex: "0" }, table); }

// How long ago `iso` was, roughly: "40 s", "12 min", "3 h", "2 d".
export function ago(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit}`;
  }
  return `${Math.floor(seconds)} s`;
}

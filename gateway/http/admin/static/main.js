// The operator dashboard: a client of the REST API (/api/v1), one module per page.
// Routes: #/people, #/people/ID[/memory|/reminders][?seq=N], #/operations, #/usage,
// #/health.
import { CSRF, newPage, reach } from "./api.js";
import { arrive, guarded, h, setRefresh, show } from "./dom.js";
import { healthPage } from "./health.js";
import { operationsPage } from "./operations.js";
import { peoplePage, personPage } from "./people.js";
import { usagePage } from "./usage.js";

const TABS = ["memory", "reminders"];

async function route() {
  newPage();
  arrive();
  const [path, query] = (location.hash.slice(1) || "/people").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  try {
    if (parts[0] === "operations") await operationsPage();
    else if (parts[0] === "health") await healthPage();
    else if (parts[0] === "usage") await usagePage();
    else if (parts[0] === "people" && parts[1]) await personPage(parts[1], TABS.includes(parts[2]) ? parts[2] : "conversation", params);
    else await peoplePage(params);
  } catch (err) {
    if (!err.stale && err.status !== 401) show("Problem", h("h1", {}, "Something went wrong"), h("p", { role: "alert" }, err.message));
  }
}

document.getElementById("signout").addEventListener("click", guarded(async () => {
  await reach("/admin/session", { method: "DELETE", headers: { "X-CSRF-Token": CSRF } });
  location.assign("/admin/signin");
}));
setRefresh(route);
window.addEventListener("hashchange", route);
route();

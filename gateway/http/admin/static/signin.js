// Signing in: the admin token, or a one-time link's secret (in the address's fragment,
// which no server and no link previewer ever sees), is exchanged for a session cookie,
// then on to the dashboard.
(() => {
  const form = document.getElementById("signin");
  const problem = document.getElementById("problem");

  async function signIn(body) {
    problem.textContent = "";
    const r = await fetch("/admin/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (r.ok) { location.assign("/admin"); return; }
    const answer = await r.json().catch(() => ({}));
    problem.textContent = (answer.error && answer.error.message) || "Sign-in failed (" + r.status + ")";
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    signIn({ token: form.token.value });
  });

  const link = new URLSearchParams(location.hash.slice(1)).get("link");
  if (link) {
    history.replaceState(null, "", location.pathname);  // spent either way: not kept in history
    signIn({ link });
  }
})();

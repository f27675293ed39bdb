// Signing in: the admin token is exchanged for a session cookie, then on to the dashboard.
(() => {
  const form = document.getElementById("signin");
  const problem = document.getElementById("problem");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    problem.textContent = "";
    const r = await fetch("/admin/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: form.token.value }),
    });
    if (r.ok) { location.assign("/admin"); return; }
    const body = await r.json().catch(() => ({}));
    problem.textContent = (body.error && body.error.message) || "Sign-in failed (" + r.status + ")";
  });
})();

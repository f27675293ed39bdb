"""A first run signs its operator in (DESIGN §13): with no PARLEY_ADMIN_TOKEN, `parley
serve` keeps an admin token of its own in the data dir (0600) and, on a terminal, prints
a link that signs a browser in to the dashboard once; `parley admin-link` prints a fresh
one at any time. The link is never the admin token, never in a log, and spent by its
first use."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from playwright.async_api import Browser, Page, expect

from tests.support.process import REPO, free_port, parley_env, parley_serve, ready, run_parley
from tests.support.webpage import TIMEOUT_MS

pytest_plugins = ["tests.support.browser"]

LINK = re.compile(r"(http://\S+/admin/signin#link=([\w-]+))")
SPENT = "this sign-in link has been used or has expired"


@contextlib.asynccontextmanager
async def _serve_on_a_terminal(
    env: dict[str, str],
) -> AsyncIterator[tuple[str, asyncio.Task[bytes]]]:
    """`parley serve` with its stdout on a pseudo-terminal: the link it printed, and
    what it writes to stderr (read as it comes)."""
    controller, terminal = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "serve",
        env=env,
        cwd=REPO,
        stdout=terminal,
        stderr=asyncio.subprocess.PIPE,
    )
    os.close(terminal)
    assert process.stderr is not None
    stderr = asyncio.create_task(process.stderr.read())
    try:
        printed = await asyncio.wait_for(asyncio.to_thread(_read_link, controller), 60)
        yield printed, stderr
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
        os.close(controller)


def _read_link(controller: int) -> str:
    seen = b""
    while (found := LINK.search(seen.decode(errors="replace"))) is None:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the server exited
            chunk = b""
        if not chunk:
            raise AssertionError(f"no sign-in link was printed: {seen!r}")
        seen += chunk
    return found.group(1)


async def test_a_first_run_prints_a_link_that_signs_a_browser_in_once(
    tmp_path: Path, browser: Browser, page: Page
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = parley_env(data_dir=str(data_dir), port=str(port))
    async with _serve_on_a_terminal(env) as (url, stderr):
        base = f"http://127.0.0.1:{port}"
        await ready(port)
        await page.goto(url)
        await expect(page).to_have_url(base + "/admin", timeout=TIMEOUT_MS)
        await expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible()
        # Another browser with the same link: spent.
        elsewhere = await browser.new_context()
        other = await elsewhere.new_page()
        await other.goto(url)
        await expect(other.get_by_role("alert")).to_contain_text(SPENT)
        assert other.url == base + "/admin/signin"  # the secret is gone from the address
        await elsewhere.close()
        token = (data_dir / "admin_token").read_text().strip()

    secret = LINK.search(url).group(2)  # type: ignore[union-attr]
    assert stat.S_IMODE((data_dir / "admin_token").stat().st_mode) == 0o600
    assert len(token) >= 32
    assert secret != token
    logged = (await stderr).decode()
    assert secret not in logged
    assert token not in logged


async def test_admin_link_prints_a_fresh_link_that_works_once(tmp_path: Path) -> None:
    port = free_port()
    env = parley_env(data_dir=str(tmp_path / "data"), port=str(port))
    made = run_parley("admin-link", env=env, cwd=REPO)
    assert made.returncode == 0, made.stderr
    url = made.stdout.strip()
    secret = LINK.search(url).group(2)  # type: ignore[union-attr]
    assert url == f"http://127.0.0.1:{port}/admin/signin#link={secret}"

    async with parley_serve(env, tmp_path) as served:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base) as browser:
            first = await browser.post("/admin/session", json={"link": secret})
            # By hand: the cookie is Secure, and httpx keeps none for plain HTTP.
            cookie = {"Cookie": f"parley_operator={first.cookies.get('parley_operator')}"}
            dashboard = await browser.get("/admin", headers=cookie)
        async with httpx.AsyncClient(base_url=base) as another:
            again = await another.post("/admin/session", json={"link": secret})
            forged = await another.post("/admin/session", json={"link": secret[:-1] + "x"})
            neither = await another.post("/admin/session", json={})
        logged = await served.stop()

    assert first.status_code == 204, first.text
    assert dashboard.status_code == 200  # signed in (else a redirect to the sign-in page)
    assert again.status_code == 401
    assert SPENT in again.json()["error"]["message"]
    assert forged.status_code == 401
    assert neither.status_code == 422
    assert secret not in logged


async def test_a_token_in_the_environment_wins_and_no_file_is_made(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = "an-operators-own-admin-token-0123456789"
    port = free_port()
    env = parley_env(data_dir=str(data_dir), port=str(port), admin_token=token)
    made = run_parley("admin-link", env=env, cwd=REPO)
    assert made.returncode == 0, made.stderr
    secret = LINK.search(made.stdout).group(2)  # type: ignore[union-attr]

    async with (
        parley_serve(env, tmp_path),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        signed = await client.post("/admin/session", json={"link": secret})
        by_token = await client.get(
            "/api/v1/sessions", headers={"Authorization": f"Bearer {token}"}
        )

    assert signed.status_code == 204
    assert by_token.status_code == 200
    assert not (data_dir / "admin_token").exists()

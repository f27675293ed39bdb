"""Headless Chromium fixtures for page tests: `chromium`, `browser` and `page`.

A plugin: a test module loads it with `pytest_plugins = ["tests.support.browser"]`.
Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.support.databases import require_service
from tests.support.webpage import TIMEOUT_MS

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        require_service(
            "Chromium",
            FileNotFoundError(f"{CHROMIUM} is missing; install it with `apt-get install chromium`"),
        )
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh profile (empty localStorage); fails the test on any uncaught page error."""
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        await context.close()
    assert errors == [], f"uncaught errors in the page: {errors}"


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """Where a test saves what people should look at (screenshots): kept after the run,
    under $PARLEY_TEST_ARTIFACTS (default `test-artifacts/` in the checkout), one folder
    per test."""
    root = Path(
        os.environ.get("PARLEY_TEST_ARTIFACTS") or Path(__file__).parents[2] / "test-artifacts"
    )
    folder = root / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")
    folder.mkdir(parents=True, exist_ok=True)
    return folder

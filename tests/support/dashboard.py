"""The operator dashboard in a browser over a gateway holding the world (two people, a
group, an archive, profiles, deliveries, pairing requests): signing in, the API beside
it, reading the database underneath, and a page kept from reaching any other host."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import (
    BrowserContext,
    Dialog,
    Locator,
    Page,
    Route,
    ViewportSize,
    expect,
)
from sqlalchemy import Select

from memory.storage.engine import create_engine
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import ADMIN_TOKEN
from tests.support.platforms import ADMIN, Platforms, platform_gateway
from tests.support.polling import eventually
from tests.support.webpage import TIMEOUT_MS
from tests.support.world import World, build_world

T = TypeVar("T")
DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=360, height=740)


class OwnOrigin:
    """Lets a browser context reach the gateway only: any request elsewhere is refused
    and kept in `foreign` (the dashboard loads nothing from another origin)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.foreign: list[str] = []

    async def install(self, context: BrowserContext) -> None:
        await context.route("**/*", self._route)

    async def _route(self, route: Route) -> None:
        url = route.request.url
        if url == self.origin or url.startswith(self.origin + "/"):
            await route.continue_()
        else:
            self.foreign.append(url)
            await route.abort()


@dataclass
class Dashboard:
    p: Platforms
    world: World
    guard: OwnOrigin

    @property
    def url(self) -> str:
        return self.p.gw.url

    async def api(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> Any:
        """The REST API with the admin token (and `headers`)."""
        return await self.p.gw.http.request(
            method, "/api/v1" + path, headers=ADMIN | (headers or {}), **kwargs
        )

    async def rows(self, query: Select[T]) -> list[T]:
        """What the database holds, read beside the gateway (the world's own engine)."""
        async with self.world.sessions() as session:
            return list(await session.scalars(query))

    async def one(self, query: Select[T]) -> T | None:
        async with self.world.sessions() as session:
            return await session.scalar(query)


@contextlib.asynccontextmanager
async def dashboard(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, **extra: Any
) -> AsyncIterator[Dashboard]:
    """A gateway with Telegram (Ana and Bo talk there), the world in its database and
    its transcript files in its data dir. The sweep is left for later (an hour), so what
    the world holds waiting — replies, a summary, extractions — stays so until a test
    moves it. `page` may reach the gateway only."""
    settings: dict[str, Any] = {"sweep_interval_seconds": 3600} | extra
    async with platform_gateway(database_url, tmp_path, llm, **settings) as p:
        engine = create_engine(database_url)
        try:
            world = await build_world(engine, tmp_path)
            guard = OwnOrigin(p.gw.url)
            await guard.install(page.context)
            yield Dashboard(p, world, guard)
            assert guard.foreign == [], f"the page reached beyond the gateway: {guard.foreign}"
        finally:
            await engine.dispose()


async def sign_in(page: Page, url: str) -> None:
    await page.goto(url + "/admin")
    await expect(page).to_have_url(url + "/admin/signin")
    await page.get_by_label("Admin token").fill(ADMIN_TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible(
        timeout=TIMEOUT_MS
    )


class Dialogs:
    """Answers the page's confirm() dialogs as told, keeping what each asked."""

    def __init__(self, page: Page) -> None:
        self.asked: list[str] = []
        self.accept = False
        page.on("dialog", self._answer)

    async def dismissed(self, button: Locator) -> None:
        """Click `button` until its question is asked (and dismissed). A click that
        lands while the page draws its lists again reaches a button already replaced
        and asks nothing; a dismissed question changes nothing, so asking again is
        harmless. Once the clicked button is enabled again its question was answered."""
        assert not self.accept
        before = len(self.asked)

        async def click() -> int:
            await button.click()
            await expect(button).to_be_enabled()
            return len(self.asked)

        await eventually(click, until=lambda asked: asked > before, interval=0.2)

    async def _answer(self, dialog: Dialog) -> None:
        self.asked.append(dialog.message)
        if self.accept:
            await dialog.accept()
        else:
            await dialog.dismiss()

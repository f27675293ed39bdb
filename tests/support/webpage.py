"""What a test does on a page in the browser: open the web chat, write in it, cut its
socket, and watch for Content-Security-Policy refusals."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from pathlib import Path

from playwright.async_api import ConsoleMessage, Page, WebSocketRoute, expect

TIMEOUT_MS = 10_000
# Where the page keeps its visitor token.
TOKEN_KEY = "parley.webchat.token"


def csp_violations(page: Page) -> list[str]:
    """A list that fills with every Content-Security-Policy refusal the page reports."""
    found: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            found.append(message.text)

    page.on("console", seen)
    return found


async def open_chat(page: Page, url: str) -> None:
    """The chat as a page of its own (the widget's frame, opened directly)."""
    await page.goto(url + "/webchat/frame")
    await expect(page.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)


async def stored_token(page: Page) -> str:
    """The visitor token the page keeps."""
    token = await page.evaluate("key => localStorage.getItem(key)", TOKEN_KEY)
    assert isinstance(token, str)
    assert token
    return token


async def send_from_page(page: Page, text: str) -> None:
    """What a person does: type into the box and press Enter."""
    message = page.get_by_label("Message")
    await message.fill(text)
    await message.press("Enter")


class Line:
    """A page's socket (by default the web chat's), routed through Playwright so a test
    can cut it."""

    def __init__(self, pattern: str = r"/webchat/ws\b") -> None:
        self.pattern = re.compile(pattern)
        self.up = True
        self.refused = asyncio.Event()  # set when the page tried to connect while down
        self._open: list[tuple[WebSocketRoute, WebSocketRoute]] = []

    async def install(self, page: Page) -> None:
        await page.route_web_socket(self.pattern, self._route)

    async def _route(self, page_side: WebSocketRoute) -> None:
        if not self.up:
            await page_side.close(code=1011, reason="line is down")
            self.refused.set()
            return
        self._open.append((page_side, page_side.connect_to_server()))

    async def cut(self, *, stay_down: bool) -> None:
        self.up = not stay_down
        self.refused.clear()
        while self._open:
            page_side, server_side = self._open.pop()
            await server_side.close()
            await page_side.close(code=1011, reason="line cut")


class HoldingLine(Line):
    """A web chat socket whose server frames of stored messages can be held back (as a
    slow network would), while every other frame (acks, deltas) goes through."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.held: list[str] = []

    async def _route(self, page_side: WebSocketRoute) -> None:
        await super()._route(page_side)
        if self._open and self._open[-1][0] is page_side:
            server_side = self._open[-1][1]
            server_side.on_message(lambda frame: self._from_server(page_side, frame))

    def _from_server(self, page_side: WebSocketRoute, frame: str | bytes) -> None:
        if not any(side is page_side for side, _ in self._open):
            # Cut while the frame was on its way. A real socket never brings a later
            # frame once earlier ones are lost, so nothing more gets through.
            return
        if self.holding and isinstance(frame, str) and json.loads(frame)["type"] == "message":
            self.held.append(frame)
        else:
            page_side.send(frame)

    async def cut(self, *, stay_down: bool) -> None:
        """Cut the socket; what was held is lost with it, and so is what was still coming."""
        self.holding = False
        await super().cut(stay_down=stay_down)


class WatchedLine(Line):
    """A socket whose server frames go through as they come, each noted once the page
    has it: a test can wait for a frame of a type to have reached the page."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self._reached: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def _route(self, page_side: WebSocketRoute) -> None:
        await super()._route(page_side)
        if self._open and self._open[-1][0] is page_side:
            server_side = self._open[-1][1]
            server_side.on_message(lambda frame: self._from_server(page_side, frame))

    def _from_server(self, page_side: WebSocketRoute, frame: str | bytes) -> None:
        page_side.send(frame)
        if isinstance(frame, str):
            self._reached[json.loads(frame)["type"]].set()

    def forget(self, kind: str) -> None:
        """Wait for the next frame of `kind` from now on."""
        self._reached[kind].clear()

    async def reached(self, kind: str, seconds: float = TIMEOUT_MS / 1000) -> None:
        async with asyncio.timeout(seconds):
            await self._reached[kind].wait()


async def screenshot(page: Page, path: Path, *, full_page: bool = False) -> None:
    """Save a screenshot of `page` at `path` and check a picture was written."""
    png = await page.screenshot(path=path, full_page=full_page)
    assert png.startswith(b"\x89PNG"), path
    assert len(png) > 1000, path

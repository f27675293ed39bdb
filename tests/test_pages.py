"""Pages and their security headers: the web chat page and the offline API docs, each
under a CSP that forbids inline script, checked in headless Chromium."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, Request, WebSocketRoute, expect
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from connectors.webchat.connector import DEMO_CSP, frame_csp
from gateway.http.docs import DOCS_CSP
from gateway.http.headers import STRICT_CSP, SecurityHeaders
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import make_settings, running_gateway
from tests.support.webpage import csp_violations, open_chat, send_from_page

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

# The page does not care about the backend; SQLite keeps these tests self-contained.
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# What the server answers a message over `max_message_chars=20`.
TOO_LONG = "text is longer than 20 characters"

DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "init.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


def _cheap_headers(response: httpx.Response) -> None:
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


@SQLITE_ONLY
async def test_pages_carry_their_policy_and_every_response_says_nosniff(
    database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(database_url, tmp_path, None, max_body_bytes=4096)
    async with running_gateway(settings) as gw:
        demo = await gw.http.get("/")
        chat = await gw.http.get("/webchat/frame")
        docs = await gw.http.get("/docs")
        health = await gw.http.get("/healthz")
        missing = await gw.http.get("/no/such/page")
        too_big = await gw.http.post("/webchat/messages", content=b"x" * 5000)

    for page, policy in ((demo, DEMO_CSP), (chat, frame_csp([])), (docs, DOCS_CSP)):
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers.get_list("content-security-policy") == [policy]
        _cheap_headers(page)
    # Only the chat itself may be framed (by Parley's own pages, here).
    assert demo.headers["x-frame-options"] == "DENY"
    assert docs.headers["x-frame-options"] == "DENY"
    assert "x-frame-options" not in chat.headers
    # JSON answers, errors and middleware refusals alike: the cheap headers, no page policy.
    for response, status in ((health, 200), (missing, 404), (too_big, 413)):
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        _cheap_headers(response)
        assert "content-security-policy" not in response.headers
        assert "x-frame-options" not in response.headers


@SQLITE_ONLY
async def test_the_widget_and_the_frames_files_are_served_gzipped_and_revalidated(
    database_url: str, tmp_path: Path
) -> None:
    files = ["widget.js", "page.js", "markdown.js", "page.css"]
    async with running_gateway(make_settings(database_url, tmp_path, None)) as gw:
        # httpx asks for gzip itself and unpacks what comes back.
        packed = {name: await gw.http.get(f"/webchat/{name}") for name in files}
        plain = await gw.http.get("/webchat/widget.js", headers={"Accept-Encoding": "identity"})
        etag = packed["widget.js"].headers["etag"]
        again = await gw.http.get("/webchat/widget.js", headers={"If-None-Match": etag})
        # The other encoding's tag does not stand for these bytes.
        plain_etag = plain.headers["etag"]
        crossed = await gw.http.get("/webchat/widget.js", headers={"If-None-Match": plain_etag})
        other = await gw.http.get("/webchat/widget.js", headers={"If-None-Match": '"old"'})
        # HEAD: GET's headers, no body (link checkers, `curl -I`).
        heads = {
            path: await gw.http.head(path)
            for path in ("/webchat/widget.js", "/webchat/frame", "/", "/admin/static/admin.css")
        }

    source = Path("connectors/webchat")
    for name, response in packed.items():
        assert response.headers["content-encoding"] == "gzip", name
        assert response.content == (source / name).read_bytes()
        assert response.headers["vary"] == "Accept-Encoding"
    assert "content-encoding" not in plain.headers
    assert plain.content == (source / "widget.js").read_bytes()
    assert plain.headers["cross-origin-resource-policy"] == "cross-origin"
    assert again.status_code == 304
    assert again.content == b""
    assert plain_etag != etag
    assert crossed.status_code == 200
    assert other.status_code == 200
    assert {path: r.status_code for path, r in heads.items()} == dict.fromkeys(heads, 200)
    assert not [path for path, r in heads.items() if r.content]
    head = heads["/webchat/widget.js"]
    assert head.headers["etag"] == etag
    assert int(head.headers["content-length"]) == len(gzip.compress(plain.content, 9, mtime=0))


def test_the_docs_say_what_the_widget_and_its_frame_weigh() -> None:
    source = Path("connectors/webchat")
    readme = Path("docs/widget.md").read_text(encoding="utf-8")
    widget = (source / "widget.js").read_bytes()
    weighs = f"{len(widget) / 1000:.1f} kB ({len(gzip.compress(widget, 9)) / 1000:.1f} kB gzipped)"
    frame = [(source / n).read_bytes() for n in ("page.html", "page.js", "markdown.js", "page.css")]
    frame_gz = sum(len(gzip.compress(body, 9)) for body in frame)

    assert f"`widget.js` is one self-contained file, {weighs}" in readme
    assert f"(`/webchat/frame`, {frame_gz / 1000:.1f} kB" in readme


async def test_an_html_response_without_a_policy_of_its_own_gets_the_strict_one() -> None:
    async def bare(_: object) -> HTMLResponse:
        return HTMLResponse("<p>hi</p>")

    async def text(_: object) -> PlainTextResponse:
        return PlainTextResponse("hi", headers={"Referrer-Policy": "same-origin"})

    app = SecurityHeaders(Starlette(routes=[Route("/bare", bare), Route("/text", text)]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        page = await client.get("/bare")
        plain = await client.get("/text")

    assert page.headers.get_list("content-security-policy") == [STRICT_CSP]
    assert page.headers["x-frame-options"] == "DENY"
    _cheap_headers(page)
    assert "content-security-policy" not in plain.headers
    # A route's own choice stands.
    assert plain.headers["referrer-policy"] == "same-origin"
    assert plain.headers["x-content-type-options"] == "nosniff"


@SQLITE_ONLY
async def test_the_docs_and_their_assets_are_served_from_the_installed_package(
    database_url: str, tmp_path: Path
) -> None:
    async with running_gateway(make_settings(database_url, tmp_path, None)) as gw:
        docs = await gw.http.get("/docs")
        assets = {name: await gw.http.get(f"/docs/assets/{name}") for name in DOCS_ASSETS}
        bundle = assets["swagger-ui-bundle.js"]
        again = await gw.http.get(
            "/docs/assets/swagger-ui-bundle.js", headers={"If-None-Match": bundle.headers["etag"]}
        )
        refused = [
            (await gw.http.get(path)).status_code
            for path in ("/redoc", "/docs/assets/redoc.standalone.js", "/docs/assets/..%2Fcore.py")
        ]
        schema = (await gw.http.get("/openapi.json")).json()
        head = await gw.http.head("/docs/assets/swagger-ui-bundle.js")

    assert docs.status_code == 200
    assert "<script>" not in docs.text  # scripts only from files: the CSP forbids inline ones
    for name, media_type in DOCS_ASSETS.items():
        response = assets[name]
        assert response.status_code == 200, name
        assert response.headers["content-type"] == media_type
        assert response.headers["cache-control"] == "public, max-age=86400"
        _cheap_headers(response)
    assert "SwaggerUIBundle" in bundle.text
    assert len(bundle.content) > 100_000  # the real bundle, not a stub
    # 1.5 MB sent as about 0.4 MB.
    assert bundle.headers["content-encoding"] == "gzip"
    assert int(bundle.headers["content-length"]) < len(bundle.content) / 3
    assert (head.status_code, head.content) == (200, b"")
    # A picture gzip would only make larger goes as it is.
    assert "content-encoding" not in assets["favicon.png"].headers
    assert head.headers["etag"] == bundle.headers["etag"]
    assert again.status_code == 304
    assert again.content == b""
    assert refused == [404, 404, 404]
    assert not [path for path in schema["paths"] if path.startswith("/docs")]


@pytest.mark.browser
@SQLITE_ONLY
async def test_the_docs_render_swagger_ui_offline_under_their_policy(
    database_url: str, tmp_path: Path, page: Page
) -> None:
    refusals = csp_violations(page)
    requested: list[str] = []

    def record(request: Request) -> None:
        requested.append(request.url)

    page.on("request", record)
    async with running_gateway(make_settings(database_url, tmp_path, None)) as gw:
        await page.goto(gw.url + "/docs")
        await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Parley")
        # The operations are listed, so the schema was fetched and read.
        await expect(page.locator(".opblock-summary-path").first).to_be_visible()

    assert refusals == []
    assert requested
    assert [url for url in requested if not url.startswith(gw.url + "/")] == []


@pytest.mark.browser
@SQLITE_ONLY
async def test_the_web_chat_page_works_under_its_policy_and_it_holds(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    refusals = csp_violations(page)
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "hello under a policy")
        await expect(page.locator("#log .msg:not(.draft)")).to_have_text(
            ["hello under a policy", "reply 1"]
        )
        # The style sheet is a file now; it must still apply.
        colour = await page.locator("#log .msg.user").evaluate(
            "el => getComputedStyle(el).backgroundColor"
        )
        assert refusals == []

        # What the policy is for: script injected inline does not run.
        with pytest.raises(Exception, match="Content Security Policy"):
            await page.add_script_tag(content="window.__injected = true")
        assert await page.evaluate("() => window.__injected") is None

    assert colour == "rgb(37, 99, 235)"
    assert refusals


class HeldErrors:
    """Routes the page's socket through Playwright and holds back `error` frames from
    the server until the test lets them through."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.arrived = asyncio.Event()
        self._page_side: WebSocketRoute | None = None

    async def install(self, page: Page) -> None:
        await page.route_web_socket(re.compile(r"/webchat/ws\b"), self._route)

    def _route(self, page_side: WebSocketRoute) -> None:
        self._page_side = page_side
        server_side = page_side.connect_to_server()

        def from_server(message: str | bytes) -> None:
            if json.loads(message)["type"] == "error":
                self.held.append(str(message))
                self.arrived.set()
            else:
                page_side.send(message)

        server_side.on_message(from_server)

    def release(self) -> None:
        assert self._page_side is not None
        for message in self.held:
            self._page_side.send(message)
        self.held.clear()


@pytest.mark.browser
@SQLITE_ONLY
async def test_a_refused_message_comes_back_into_an_empty_box(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    too_long = "this message is far too long"
    settings = make_settings(database_url, tmp_path, llm, max_message_chars=20)
    async with running_gateway(settings) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, too_long)

        await expect(page.locator("#log .event")).to_have_text([TOO_LONG])
        await expect(page.get_by_label("Message")).to_have_value(too_long)
        await expect(page.locator("#log .msg.user")).to_have_count(0)

        # An accepted message is acknowledged and forgotten: nothing comes back later.
        await send_from_page(page, "short one")
        await expect(page.locator("#log .msg:not(.draft)")).to_have_text(
            [TOO_LONG, "short one", "reply 1"]
        )
        await expect(page.get_by_label("Message")).to_have_value("")


@pytest.mark.browser
@SQLITE_ONLY
async def test_a_refused_message_never_overwrites_what_is_being_typed(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page
) -> None:
    errors = HeldErrors()
    await errors.install(page)
    settings = make_settings(database_url, tmp_path, llm, max_message_chars=20)
    async with running_gateway(settings) as gw:
        await open_chat(page, gw.url)
        await send_from_page(page, "this message is far too long")
        await asyncio.wait_for(errors.arrived.wait(), 10)
        box = page.get_by_label("Message")
        await box.fill("something new")

        errors.release()

        await expect(page.locator("#log .event")).to_have_text([TOO_LONG])
        await expect(box).to_have_value("something new")

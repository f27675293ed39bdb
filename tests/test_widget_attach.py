"""Images in the web chat page (DESIGN §11), in headless Chromium: the attach button,
paste and drop upload each image at once and show it before it is sent; a refused file
says why and loses nothing; a message's images show in its bubble, from history too.

Needs Debian's Chromium at /usr/bin/chromium (`apt-get install -y chromium`); the tests
skip with a reason when it is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import base64
import io
import random
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.async_playwright import Axe
from PIL import ExifTags, Image
from playwright.async_api import FileChooser, Page, expect

from gateway.jobs.memory_jobs import DESCRIBE_SYSTEM
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import make_settings, running_gateway
from tests.support.polling import eventually
from tests.support.webpage import (
    TIMEOUT_MS,
    csp_violations,
    open_chat,
    screenshot,
    send_from_page,
    stored_token,
)

# The fixtures `chromium`, `browser` and `page`.
pytest_plugins = ["tests.support.browser"]

pytestmark = [
    pytest.mark.browser,
    # The page does not care about the backend; SQLite keeps the browser tests self-contained.
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

SEEN = "I see a red square."
DESCRIPTION = "A red square on white."

# Whether an object URL still gives its image (revoked: it does not).
LOADS_JS = """url => new Promise((done) => {
  const img = new Image();
  img.onload = () => done("alive");
  img.onerror = () => done("revoked");
  img.src = url;
})"""

# Files the way a browser hands them over on paste or drop: `event` (paste, dragover,
# drop) on `target` carrying `files`. False: the page took the event (preventDefault).
HAND_OVER_JS = """({ event, target, files }) => {
  const data = new DataTransfer();
  for (const f of files) {
    const bytes = Uint8Array.from(atob(f.data), (c) => c.charCodeAt(0));
    data.items.add(new File([bytes], f.name, { type: f.type }));
  }
  const init = { bubbles: true, cancelable: true };
  const e = event === "paste"
    ? new ClipboardEvent("paste", { ...init, clipboardData: data })
    : new DragEvent(event, { ...init, dataTransfer: data });
  return document.querySelector(target).dispatchEvent(e);
}"""


def _photo(
    width: int = 120, height: int = 80, color: tuple[int, int, int] = (200, 30, 30)
) -> bytes:
    """A JPEG as a phone writes it: a camera make and where it was taken."""
    image = Image.new("RGB", (width, height), color)
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "PhoneMaker"
    exif[ExifTags.IFD.GPSInfo] = {
        ExifTags.GPS.GPSLatitudeRef: "N",
        ExifTags.GPS.GPSLatitude: (48.0, 51.0, 30.0),
        ExifTags.GPS.GPSLongitudeRef: "E",
        ExifTags.GPS.GPSLongitude: (2.0, 17.0, 40.0),
    }
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif)
    return out.getvalue()


def _png(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (30, 30, 200)).save(out, format="PNG")
    return out.getvalue()


def _noise(side: int = 200) -> bytes:
    """A JPEG that does not compress: tens of kilobytes."""
    pixels = random.Random(29).randbytes(side * side * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


def _file(name: str, mime: str, data: bytes) -> dict[str, str]:
    return {"name": name, "type": mime, "data": base64.b64encode(data).decode()}


def _image(part: dict[str, Any]) -> Image.Image:
    """The image an OpenAI `image_url` part carries in its data URL."""
    head, data = part["image_url"]["url"].split(",", 1)
    assert head == "data:image/jpeg;base64" or head == "data:image/png;base64", head
    return Image.open(io.BytesIO(base64.b64decode(data)))


class SeeingModel:
    """Describes an image when asked to; in a turn, says it sees the red square if the
    person's last message carries an image, and notes the sizes of those it was shown."""

    def __init__(self) -> None:
        self.shown: list[list[tuple[int, int]]] = []

    def __call__(self, body: dict[str, Any], _: int) -> Reply | None:
        messages = body["messages"]
        if messages[0]["content"] == DESCRIBE_SYSTEM:
            return Reply(DESCRIPTION)
        content = [m for m in messages if m["role"] == "user"][-1]["content"]
        parts = content if isinstance(content, list) else []
        images = [_image(p).size for p in parts if p["type"] == "image_url"]
        self.shown.append(images)
        return Reply(SEEN if images else "I see no image.")


async def test_an_image_attached_with_the_button_is_previewed_sent_and_seen(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    model = SeeingModel()
    llm.responder = model
    photo, other = tmp_path / "photo.jpg", tmp_path / "other.jpg"
    photo.write_bytes(_photo())
    other.write_bytes(_photo(60, 60, (30, 160, 60)))
    refused = csp_violations(page)
    # Listened for before the page opens: the browser hands the picker to the test only
    # once it is told to, which a key pressed at once could beat.
    chosen: asyncio.Future[FileChooser] = asyncio.get_running_loop().create_future()
    page.once("filechooser", lambda chooser: chosen.set_result(chooser))
    async with running_gateway(make_settings(database_url, tmp_path, llm)) as gw:
        await open_chat(page, gw.url)
        # By keyboard: the button is the stop after the log, and opens the file picker.
        await page.get_by_role("log", name="Conversation").focus()
        await page.keyboard.press("Tab")
        await expect(page.get_by_role("button", name="Attach an image")).to_be_focused()
        await page.keyboard.press("Enter")
        async with asyncio.timeout(TIMEOUT_MS / 1000):
            picker = await chosen
        await picker.set_files([photo, other])
        box = page.get_by_role("list", name="Images to send")
        previews = box.get_by_role("img")
        await expect(previews).to_have_count(2)
        names = [await img.get_attribute("alt") for img in await previews.all()]
        await expect(previews.first).to_have_js_property("naturalWidth", 120)
        await expect(box.locator("li:not([data-state])")).to_have_count(2)  # both uploaded
        await screenshot(page, artifacts / "previews.png")
        removed_url = await previews.nth(1).get_attribute("src")
        await page.get_by_role("button", name="Remove other.jpg").click()
        await expect(previews).to_have_count(1)
        await expect(page.get_by_label("Message")).to_be_focused()
        removed = await page.evaluate(LOADS_JS, removed_url)
        await expect(page.get_by_role("button", name="Remove photo.jpg")).to_be_visible()

        await send_from_page(page, "what is this?")
        await expect(page.locator(".msg.assistant:not(.draft)")).to_have_text(SEEN)
        sent = page.locator(".msg.user")
        await expect(sent).to_have_text("what is this?")
        await expect(sent.get_by_role("img", name="Image")).to_have_js_property("naturalWidth", 120)
        await expect(box).to_be_hidden()
        await expect(page.get_by_role("alert")).to_be_hidden()
        await screenshot(page, artifacts / "sent.png")

        # The model saw it once; its description is written beside the turn.
        token = await stored_token(page)

        async def history() -> list[dict[str, Any]]:
            return await gw.history(token)

        stored = await eventually(
            history, until=lambda h: bool(h and h[0]["attachments"][0]["text"])
        )
        # Reopened: the message's image comes from the server, described.
        await open_chat(page, gw.url)
        again = page.locator(".msg.user img")
        await expect(again).to_have_count(1)
        await expect(again).to_have_attribute("alt", DESCRIPTION)
        await expect(again).to_have_js_property("naturalWidth", 120)
        await expect(page.locator(".msg.user")).to_have_text("what is this?")
        source = await again.get_attribute("src")
        await screenshot(page, artifacts / "reopened.png")

    assert names == ["photo.jpg", "other.jpg"]
    assert removed == "revoked"  # the removed preview's memory is freed
    assert model.shown[0] == [(120, 80)]  # the one kept, not the one removed
    [attachment] = stored[0]["attachments"]
    assert (attachment["kind"], attachment["mime"], stored[0]["text"]) == (
        "image",
        "image/jpeg",
        "what is this?",
    )
    assert source is not None
    assert source.startswith("blob:")
    assert refused == []


async def test_a_refused_file_says_why_and_nothing_else_is_lost(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    model = SeeingModel()
    llm.responder = model
    settings = make_settings(
        database_url, tmp_path, llm, media_max_bytes=16 * 1024, webchat_uploads_per_minute=4
    )
    big = _noise()
    assert len(big) > 16 * 1024
    only_images = "Only images can be sent (JPEG, PNG, WebP or GIF)."
    # In order, against a limit of 4 uploads a minute: one kept, then each refusal. The
    # server tells what a file is by its bytes; the page refuses what says it is no image
    # without sending it (so the fourth upload is the last one taken).
    refusals = [
        ("photo.jpg", "image/jpeg", b"just words in disguise\n", only_images),
        ("big.jpg", "image/jpeg", big, "That file is too large."),
        ("cut.jpg", "image/jpeg", _photo(600, 400)[:700], "That image could not be read."),
        ("late.jpg", "image/jpeg", _photo(), "Too many uploads: wait a minute and try again."),
        ("notes.txt", "text/plain", b"words", only_images),
    ]
    refused = csp_violations(page)
    async with running_gateway(settings) as gw:
        await open_chat(page, gw.url)
        message = page.get_by_label("Message")
        await message.fill("keep these words")
        chooser = page.locator("input[type=file]")
        await chooser.set_input_files(
            {"name": "kept.jpg", "mimeType": "image/jpeg", "buffer": _photo()}
        )
        previews = page.get_by_role("list", name="Images to send").get_by_role("img")
        await expect(previews).to_have_count(1)
        await expect(page.locator("#attached li:not([data-state])")).to_have_count(1)
        alert = page.get_by_role("alert")
        for name, mime, data, why in refusals:
            await chooser.set_input_files({"name": name, "mimeType": mime, "buffer": data})
            await expect(alert).to_have_text(why)
            # Nothing else goes: the image before it, the words being written.
            await expect(previews).to_have_count(1)
            await expect(message).to_have_value("keep these words")
        # The previews, their remove buttons and the error pass an accessibility check.
        found: dict[str, list[str]] = {}
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            results = await Axe().run(page)
            found[scheme] = [
                f"{v['id']}: {[n['target'] for n in v['nodes']]}"
                for v in results.response["violations"]
            ]
            await screenshot(page, artifacts / f"refused-{scheme}.png")

        await message.press("Enter")
        await expect(page.locator(".msg.assistant:not(.draft)")).to_have_text(SEEN)
        await expect(alert).to_be_hidden()
        stored = await gw.history(await stored_token(page))

    assert found == {"light": [], "dark": []}
    assert [(m["text"], len(m["attachments"])) for m in stored] == [
        ("keep these words", 1),
        (SEEN, 0),
    ]
    assert model.shown[0] == [(120, 80)]
    assert refused == []


async def test_pasted_and_dropped_images_are_attached_at_most_ten_and_sent_without_words(
    database_url: str, tmp_path: Path, llm: FakeLLM, page: Page, artifacts: Path
) -> None:
    model = SeeingModel()
    llm.responder = model
    settings = make_settings(database_url, tmp_path, llm, webchat_uploads_per_minute=100)
    photos = [_file(f"photo{n}.jpg", "image/jpeg", _photo(40 + n, 40)) for n in range(10)]
    refused = csp_violations(page)
    async with running_gateway(settings) as gw:
        await open_chat(page, gw.url)
        message = page.get_by_label("Message")
        pasted = await page.evaluate(
            HAND_OVER_JS,
            {
                "event": "paste",
                "target": "#text",
                "files": [_file("image.png", "image/png", _png())],
            },
        )
        previews = page.get_by_role("list", name="Images to send").get_by_role("img")
        await expect(previews).to_have_count(1)
        over = {"event": "dragover", "target": "#log", "files": photos[:2]}
        hovered = await page.evaluate(HAND_OVER_JS, over)
        await expect(page.locator("body")).to_have_class("dropping")
        drop = {"event": "drop", "target": "#log", "files": photos}
        dropped = await page.evaluate(HAND_OVER_JS, drop)
        await expect(page.locator("body")).not_to_have_class("dropping")
        # One pasted and nine of the ten dropped: a message takes ten.
        await expect(previews).to_have_count(10)
        await expect(page.get_by_role("alert")).to_have_text("At most 10 images a message.")
        await expect(message).to_have_value("")

        await message.press("Enter")  # no words: the images alone
        sent = page.locator(".msg.user")
        await expect(sent.locator("img")).to_have_count(10)
        await expect(page.locator(".msg.assistant:not(.draft)")).to_have_text(SEEN)
        widths = await sent.locator("img").evaluate_all("imgs => imgs.map(i => i.naturalWidth)")
        await screenshot(page, artifacts / "ten.png")
        stored = await gw.history(await stored_token(page))

    assert pasted is False  # taken by the page, not pasted as text
    assert hovered is False
    assert dropped is False  # and never opened by the browser in the page's place
    assert widths == [64, *range(40, 49)]
    assert stored[0]["text"] == ""
    # (Kept in the order their uploads finished.)
    assert sorted(a["width"] for a in stored[0]["attachments"]) == [*range(40, 49), 64]
    # The model is shown four of them (PARLEY_MEDIA_IMAGES_IN_PROMPT).
    sent_sizes = {(64, 48), *((width, 40) for width in range(40, 49))}
    assert len(set(model.shown[0])) == 4
    assert set(model.shown[0]) <= sent_sizes
    assert refused == []

"""What a test does on a page in the browser: open the web chat, write in it, and
watch for Content-Security-Policy refusals."""

from __future__ import annotations

from playwright.async_api import ConsoleMessage, Page, expect

TIMEOUT_MS = 10_000


def csp_violations(page: Page) -> list[str]:
    """A list that fills with every Content-Security-Policy refusal the page reports."""
    found: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            found.append(message.text)

    page.on("console", seen)
    return found


async def open_chat(page: Page, url: str) -> None:
    await page.goto(url + "/")
    await expect(page.locator("#status")).to_have_text("online", timeout=TIMEOUT_MS)


async def send_from_page(page: Page, text: str) -> None:
    """What a person does: type into the box and press Enter."""
    message = page.get_by_label("Message")
    await message.fill(text)
    await message.press("Enter")

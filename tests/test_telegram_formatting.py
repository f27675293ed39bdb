"""The model's Markdown on Telegram (DESIGN §10): plain text with entities whose UTF-16
offsets are right after emoji and other astral characters, every word kept (a `<` is
text, not HTML), and a long code block split so that no entity crosses a part; the fake
Bot API refuses entities outside their text, as Telegram does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from connectors.telegram.formatting import to_entities
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.platforms import platform_gateway

CHAT = 6161


def _entities(params: dict[str, Any]) -> list[tuple[str, int, int]]:
    found = params.get("entities") or []
    if isinstance(found, str):
        found = json.loads(found)
    return [(e["type"], e["offset"], e["length"]) for e in found]


def _utf16(text: str, offset: int, length: int) -> str:
    units = text.encode("utf-16-le")
    return units[2 * offset : 2 * (offset + length)].decode("utf-16-le")


async def test_a_reply_arrives_as_plain_text_with_entities_placed_after_emoji(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(Reply("Hi 👩‍💻 **done**: run `make <target>` if a<b and c>d, then _rest_."))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.telegram(tg.text_update(CHAT, "how do I build it?"))
        await p.tg.wait_until(lambda f: len(f.texts(CHAT)) == 1)

    [sent] = p.tg.sent(CHAT)
    text = sent.params["text"]
    assert text == "Hi 👩‍💻 done: run make <target> if a<b and c>d, then rest."
    assert "parse_mode" not in sent.params
    shown = {kind: _utf16(text, offset, length) for kind, offset, length in _entities(sent.params)}
    assert shown == {"bold": "done", "code": "make <target>", "italic": "rest"}


async def test_a_long_code_block_is_split_with_no_entity_crossing_a_part(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    code = "\n".join(f"    print({n})  # 🐍 line {n}" for n in range(240))
    llm.script(Reply(f"Here is **the** script:\n\n```python\n{code}\n```\n\nRun it with care."))
    async with platform_gateway(database_url, tmp_path, llm) as p:
        await p.telegram(tg.text_update(CHAT, "write me a script"))
        await p.tg.wait_until(lambda f: any("care" in text for text in f.texts(CHAT)))

    parts = p.tg.sent(CHAT)
    assert len(parts) >= 2  # every part was accepted: its entities lie inside it
    for part in parts:
        pre = [e for e in _entities(part.params) if e[0] == "pre"]
        assert pre, part.params["text"][:80]
        assert all("print(" in _utf16(part.params["text"], o, n) for _, o, n in pre)
    shown = "\n".join(part.params["text"] for part in parts)
    assert all(f"print({n})  # 🐍 line {n}" in shown for n in range(240))
    assert "```" not in shown


def test_what_the_converter_cannot_place_is_sent_as_written() -> None:
    assert to_entities("plain words") == ("plain words", [])
    text, entities = to_entities("x" * 4095 + "\n\n# heading")  # decorated past 4096
    assert text == "x" * 4095 + "\n\n# heading"
    assert entities == []

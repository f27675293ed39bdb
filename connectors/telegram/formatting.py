"""The model's Markdown as Telegram shows it: plain text and `MessageEntity` offsets
(UTF-16), never a parse mode, so no reply can fail to parse (DESIGN §10).

telegramify-markdown does the conversion. Two guards around it keep every word of a
reply: a `<` outside code is escaped first (the converter drops what looks like raw
HTML: `if a<b and c>d` would lose `<b and c>`), and anything it gets wrong (an entity
outside the text, a text longer than a message) sends the Markdown as it is.
"""

from __future__ import annotations

import re

import structlog
import telegramify_markdown
from telegram import MessageEntity

from gateway.sdk import utf16_length

log = structlog.get_logger(__name__)

MAX_CHARS = 4096
# What Telegram draws; a converter's other kinds (custom emoji, mentions) are dropped.
_KINDS = frozenset(
    {
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "code",
        "pre",
        "text_link",
        "blockquote",
        "expandable_blockquote",
    }
)
# Code, where `<` is the code's own: a fenced block, or an inline span of backticks.
_CODE = re.compile(
    r"(^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\2[ \t]*$|\Z))|(`+)(?:.+?)(?<!`)\3(?!`)",
    re.MULTILINE | re.DOTALL,
)
_CONFIG = telegramify_markdown.RenderConfig.isolated()


def to_entities(markdown: str) -> tuple[str, list[MessageEntity]]:
    """`markdown` as plain text and the entities that format it; the Markdown itself,
    with none, where the conversion cannot be trusted."""
    try:
        text, found = telegramify_markdown.convert(
            _escape_angles(markdown), latex_escape=False, config=_CONFIG
        )
    except Exception:  # a converter's bug must never keep a reply from going out
        log.warning("Markdown could not be converted; sent as written")
        return markdown, []
    length = utf16_length(text)
    if not text.strip() or length > MAX_CHARS:
        return markdown, []
    entities = []
    for entity in found:
        if entity.type not in _KINDS:
            continue
        if entity.offset < 0 or entity.length <= 0 or entity.offset + entity.length > length:
            return markdown, []
        entities.append(
            MessageEntity(
                entity.type,
                entity.offset,
                entity.length,
                url=entity.url,
                language=entity.language,
            )
        )
    return text, entities


def _escape_angles(markdown: str) -> str:
    """Every `<` outside code as `\\<`: literal text to a Markdown reader."""
    pieces, at = [], 0
    for code in _CODE.finditer(markdown):
        pieces.append(markdown[at : code.start()].replace("<", "\\<"))
        pieces.append(code.group(0))
        at = code.end()
    pieces.append(markdown[at:].replace("<", "\\<"))
    return "".join(pieces)

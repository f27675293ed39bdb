"""Where text from outside becomes our text.

Every database Parley runs on stores valid UTF-8 without NUL characters, so two rules
hold at the edge, the same on SQLite and Postgres:

- Our own APIs (web chat, REST) refuse such text with a clear 422: the client sent it
  and can fix it (`StorableText`, `refuse_unstorable`).
- A correctly signed platform event is cleaned instead (`clean`, `load_platform_json`):
  NUL characters are dropped; lone surrogates, non-characters and invalid UTF-8 become
  U+FFFD; NaN, ±Infinity and integers past 64 bits become null; so the message is stored
  and the platform gets its 2xx rather than retrying for hours.

Numbers that reach a query are bounded to what a 64-bit column holds (`MAX_INT64`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Annotated, Any, overload

from pydantic import AfterValidator

from gateway.envelopes import Inbound
from gateway.errors import InputError

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
# Platform payloads nest a handful of levels; anything deeper is not one of them.
MAX_JSON_DEPTH = 64


class MalformedJSON(InputError):
    """A body that is not JSON we can take: invalid, or nested too deep."""


# Unicode's non-characters (U+FDD0–U+FDEF and the last two code points of every plane):
# storable, but never text anyone meant to send.
_NONCHARACTERS = re.compile(
    "[\ufdd0-\ufdef"
    + "".join(
        f"{chr(plane * 0x10000 + 0xFFFE)}{chr(plane * 0x10000 + 0xFFFF)}" for plane in range(17)
    )
    + "]"
)


def clean(text: str) -> str:
    """Platform text made clean (see the module docstring); clean text comes back as is."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A round trip through UTF-16 joins surrogate pairs that arrived split and
        # replaces the lone ones.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return _NONCHARACTERS.sub("\ufffd", text)


def unstorable_reason(text: str) -> str | None:
    """Why `text` cannot be stored as it is, or None."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it has an unpaired surrogate)"
    if _NONCHARACTERS.search(text):
        return "must not contain Unicode non-characters (such as U+FFFF)"
    return None


def refuse_unstorable(text: str) -> str:
    """A pydantic validator: our own APIs refuse what platforms get cleaned."""
    reason = unstorable_reason(text)
    if reason is not None:
        raise ValueError(reason)
    return text


StorableText = Annotated[str, AfterValidator(refuse_unstorable)]


@dataclasses.dataclass(frozen=True, slots=True)
class PlatformJSON:
    """A signed platform body as clean JSON values."""

    data: Any
    # How many numbers no column holds (NaN, ±Infinity, integers past 64 bits) it carried,
    # each read as null: a connector that then cannot read the event knows a retry would
    # carry the same numbers.
    nulled_numbers: int


def load_platform_json(body: bytes) -> PlatformJSON:
    """A signed platform body as clean JSON values; `MalformedJSON` if it is not JSON."""
    nulled = 0

    def null(_: str) -> None:
        nonlocal nulled
        nulled += 1

    def integer(digits: str) -> int | None:
        # The digits counted before int() reads them: past 4,300 digits it refuses.
        if len(digits.lstrip("-")) <= 19 and MIN_INT64 <= (value := int(digits)) <= MAX_INT64:
            return value
        null(digits)
        return None

    def real(text: str) -> float | None:
        value = float(text)  # 1e999 reads as infinity
        if math.isfinite(value):
            return value
        null(text)
        return None

    try:
        data = json.loads(
            body.decode("utf-8", "replace"),
            parse_constant=null,
            parse_int=integer,
            parse_float=real,
        )
    except (ValueError, RecursionError):
        raise MalformedJSON("body is not JSON") from None
    return PlatformJSON(_cleaned(data, 0), nulled)


def _cleaned(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return clean(value)
    if depth > MAX_JSON_DEPTH:
        raise MalformedJSON(f"body nests deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, dict):
        return {clean(key): _cleaned(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_cleaned(item, depth + 1) for item in value]
    return value


# Column widths of the identity and message tables (memory/models.py): Postgres refuses
# longer values where SQLite would take them, so the limits hold before either sees them.
NAME_CHARS = 200
ID_CHARS = 200
MESSAGE_ID_CHARS = 255


def clean_inbound(inbound: Inbound) -> Inbound:
    """A connector's message made storable; `InputError` if an id is not a storable id.

    Names are cut to fit; ids are never cut, as a cut id could name someone else.
    """
    return dataclasses.replace(
        inbound,
        text=_text(inbound.text, "text"),
        display_name=_text(inbound.display_name, "display_name")[:NAME_CHARS],
        group_title=_text(inbound.group_title, "group_title")[:NAME_CHARS],
        # Connectors build labels from platform names too ("forwarded from …").
        source=None if inbound.source is None else _text(inbound.source, "source")[:NAME_CHARS],
        external_user_id=_id(inbound.external_user_id, "external_user_id", ID_CHARS),
        group_id=_id(inbound.group_id, "group_id", ID_CHARS),
        platform_message_id=_id(
            inbound.platform_message_id, "platform_message_id", MESSAGE_ID_CHARS
        ),
    )


def _text(value: object, name: str) -> str:
    # Connectors read loosely typed payloads; a number where text belongs is refused.
    if not isinstance(value, str):
        raise InputError(f"{name} is not text")
    return clean(value)


@overload
def _id(value: str, name: str, limit: int) -> str: ...
@overload
def _id(value: str | None, name: str, limit: int) -> str | None: ...
def _id(value: str | None, name: str, limit: int) -> str | None:
    if value is None:
        return None
    cleaned = _text(value, name)
    if len(cleaned) > limit:
        raise InputError(f"{name} is longer than {limit} characters")
    return cleaned

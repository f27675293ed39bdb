"""Telegram updates and WhatsApp notifications with fuzzed text, names and fields, and
what the gateway must store for each when it comes correctly signed.

A case is built on the fakes' own update shapes (`tests/fakes`), with numbers no
column holds (NaN, Infinity, integers past 64 bits) in fields Parley does not read
(`noise`, which a well-shaped case may carry), then its mutations change, drop or
retype single fields; `build` gives each run fresh platform ids, so no
run meets an earlier one's redelivery check or a chat's send pacing.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from hypothesis import strategies as st

from gateway.text import NAME_CHARS
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.support.fuzz.cleaning import as_received, clean
from tests.support.fuzz.limits import INT64_MAX
from tests.support.fuzz.strategies import (
    BOUNDARY_INTS,
    fuzz_text,
    json_scalars,
    message_texts,
    plain_text,
)

PLATFORM_TEXT_LIMIT = 4096  # both platforms', in UTF-16 code units
_ids = itertools.count(1)


def fresh_id() -> int:
    return next(_ids)


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()
# A change to one field of a payload: the path from one of its objects ("$msg" the
# message, "$root" the whole payload, ...) and the value (DROP removes the key).
Mutation = tuple[tuple[str, ...], Any]


def _apply(anchors: dict[str, Any], mutations: tuple[Mutation, ...]) -> None:
    for path, value in mutations:
        target: Any = anchors[path[0]]
        for key in path[1:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if not isinstance(target, dict):
            continue
        if value is DROP:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value


def _always_stored(text: str) -> bool:
    """Text a connector must store (cleaned), whatever else it does with messages: not
    blank once cleaned, not a command, within the platform's length."""
    cleaned = clean(text).lstrip()
    units = len(as_received(text).encode("utf-16-le", "surrogatepass")) // 2
    return bool(cleaned) and not cleaned.startswith("/") and units <= PLATFORM_TEXT_LIMIT


# How the stored text holds the sent one: all of it, at the end (after a placeholder
# such as "a photo"), or somewhere inside a placeholder.
Placement = Literal["whole", "end", "inside"]


class PlatformCase(Protocol):
    """What the webhook tests need of a case, Telegram's or WhatsApp's."""

    channel: ClassVar[str]

    @property
    def text(self) -> str: ...
    @property
    def mutations(self) -> tuple[Mutation, ...]: ...
    @property
    def role(self) -> str: ...
    @property
    def placement(self) -> Placement: ...
    @property
    def always_stored(self) -> bool: ...
    @property
    def author(self) -> str:
        """The author name it must be stored with (cut to the column)."""

    def build(self, n: int) -> dict[str, Any]: ...


def holds_text(case: PlatformCase, stored: str) -> bool:
    """Does the `stored` text hold the case's text, cleaned, where it belongs?"""
    text = clean(case.text)
    if case.placement == "whole":
        return stored == text
    return stored.endswith(text) if case.placement == "end" else text in stored


def payload_bytes(payload: dict[str, Any], ascii_only: bool) -> bytes:
    """A payload as a platform serialises it (Telegram and Meta escape non-ASCII; text
    with a surrogate cannot go out as UTF-8 at all)."""
    if not ascii_only:
        try:
            return json.dumps(payload, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            pass
    return json.dumps(payload).encode()


# -- Telegram -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TelegramCase:
    kind: str  # "text", "caption" (a photo) or "edit"
    text: str
    first_name: str
    last_name: str | None
    mutations: tuple[Mutation, ...]
    noise: tuple[Mutation, ...] = ()

    channel: ClassVar[str] = "telegram"

    @property
    def role(self) -> str:
        return "event" if self.kind == "edit" else "user"

    @property
    def placement(self) -> Placement:
        return "end" if self.kind == "caption" else "whole"

    @property
    def always_stored(self) -> bool:
        return self.kind == "caption" or _always_stored(self.text)

    @property
    def author(self) -> str:
        # As Telegram clients (and python-telegram-bot) join the names it reads.
        first, last = clean(self.first_name), clean(self.last_name or "")
        return (f"{first} {last}" if last else first)[:NAME_CHARS]

    def build(self, n: int) -> dict[str, Any]:
        user_id = 700_000_000 + n
        fields: dict[str, Any] = {"message_id": n, "update_id": 500_000_000 + n}
        if self.kind == "caption":
            update = tg.photo_update(user_id, self.text, first_name=self.first_name, **fields)
        else:
            update = tg.text_update(user_id, self.text, first_name=self.first_name, **fields)
        message = update["message"]
        if self.last_name is None:
            del message["from"]["last_name"]
        else:
            message["from"]["last_name"] = self.last_name
        if self.kind == "edit":
            message["edit_date"] = 1_700_000_100
            update["edited_message"] = update.pop("message")
        anchors = {"$root": update, "$msg": message}
        _apply(anchors, self.noise)
        _apply(anchors, self.mutations)
        return update


_TELEGRAM_PATHS: tuple[tuple[str, ...], ...] = (
    ("$root", "update_id"),
    ("$msg", "chat"),
    ("$msg", "from"),
    ("$msg", "date"),
    ("$msg", "message_id"),
    ("$msg", "text"),
    ("$msg", "entities"),
    ("$msg", "reply_to_message"),
    ("$msg", "chat", "id"),
    ("$msg", "chat", "type"),
    ("$msg", "chat", "title"),
    ("$msg", "from", "id"),
    ("$msg", "from", "is_bot"),
    ("$msg", "from", "first_name"),
    ("$msg", "from", "username"),
    ("$msg", "edit_date"),
    ("$msg", "photo"),
    ("$msg", "forward_origin"),
    ("$msg", "forward_from"),
    ("$msg", "forward_from_chat"),
    ("$msg", "forward_sender_name"),
)
odd_values = st.one_of(
    json_scalars,
    st.sampled_from([[], {}, [1], {"a": 1}, "", -1, 0, 2**64, 10**30, INT64_MAX + 1]),
)
# Numbers no column holds; a correctly signed payload carries them in fields Parley does
# not read without harm.
_unholdable_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, INT64_MAX + 1, -INT64_MAX - 2, 2**64, 10**30]
)


def _noise(paths: tuple[tuple[str, ...], ...]) -> st.SearchStrategy[tuple[Mutation, ...]]:
    return st.lists(st.tuples(st.sampled_from(paths), _unholdable_numbers), max_size=2).map(tuple)


telegram_noise = _noise(
    (
        ("$root", "x_count"),
        ("$msg", "sender_boost_count"),
        ("$msg", "from", "x_count"),
        ("$msg", "chat", "x_count"),
    )
)
_entity_offsets = st.one_of(st.integers(-2, 12), st.sampled_from(BOUNDARY_INTS))
entity_lists = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["mention", "bot_command", "text_mention", "bold", "x"]),
            "offset": _entity_offsets,
            "length": _entity_offsets,
        }
    ),
    max_size=3,
)


def _forward_origin(kind: str, name: str) -> dict[str, Any]:
    origin: dict[str, Any] = {"type": kind, "date": 1_700_000_000}
    if kind == "user":
        origin["sender_user"] = {"id": 5, "is_bot": False, "first_name": name}
    elif kind == "hidden_user":
        origin["sender_user_name"] = name
    else:
        origin["chat"] = origin["sender_chat"] = {"id": -100, "type": "channel", "title": name}
        origin["message_id"] = 1
    return origin


# Forwarded messages: an origin (Bot API 7) or the older fields, with fuzzed names.
forward_values = st.one_of(
    st.builds(
        _forward_origin, st.sampled_from(["user", "hidden_user", "chat", "channel", "x"]), fuzz_text
    ),
    st.builds(lambda name: {"id": 5, "is_bot": False, "first_name": name}, fuzz_text),
    st.builds(lambda title: {"id": -100, "type": "channel", "title": title}, fuzz_text),
)
telegram_mutations = st.lists(
    st.tuples(
        st.sampled_from(_TELEGRAM_PATHS),
        st.one_of(
            st.just(DROP),
            odd_values,
            st.sampled_from(["group", "supergroup", "channel", "private", "secret"]),
            entity_lists,
            forward_values,
        ),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


@st.composite
def telegram_cases(draw: st.DrawFn) -> TelegramCase:
    # Telegram never sends an empty first name; one that is empty once cleaned, it may.
    names = st.one_of(plain_text, fuzz_text.filter(bool))
    return TelegramCase(
        kind=draw(st.sampled_from(["text", "text", "text", "caption", "edit"])),
        text=draw(message_texts(PLATFORM_TEXT_LIMIT)),
        first_name=draw(names),
        last_name=draw(st.one_of(st.none(), names)),
        mutations=draw(st.one_of(st.just(()), st.just(()), telegram_mutations)),
        noise=draw(telegram_noise),
    )


# -- WhatsApp -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhatsAppCase:
    kind: str  # "text", "button", "interactive", "image" or "reaction"
    text: str
    name: str
    mutations: tuple[Mutation, ...]
    noise: tuple[Mutation, ...] = ()

    channel: ClassVar[str] = "whatsapp"

    @property
    def role(self) -> str:
        return "event" if self.kind == "reaction" else "user"

    @property
    def placement(self) -> Placement:
        if self.kind == "image":
            return "end"
        return "inside" if self.kind == "reaction" else "whole"

    @property
    def always_stored(self) -> bool:
        # Placeholders (a photo, a reaction) are stored whatever their text.
        return self.kind in ("image", "reaction") or _always_stored(self.text)

    @property
    def author(self) -> str:
        return clean(self.name)[:NAME_CHARS]

    def build(self, n: int) -> dict[str, Any]:
        bodies: dict[str, dict[str, Any]] = {
            "button": {"text": self.text, "payload": "fuzz"},
            "interactive": {
                "type": "button_reply",
                "button_reply": {"id": "fuzz", "title": self.text},
            },
            "image": {"caption": self.text, "mime_type": "image/jpeg", "id": "1234"},
            "reaction": {"message_id": "wamid.OLD", "emoji": self.text},
        }
        # Sent now: a reply is only allowed within 24 hours of the person's message.
        root = wa.message_notification(
            f"1555{n:08d}",
            self.kind,
            name=self.name,
            text=self.text,
            wamid=f"wamid.FUZZ{n:010d}",
            body=bodies.get(self.kind),
        )
        entry = root["entry"][0]
        change = entry["changes"][0]
        value = change["value"]
        anchors = {"$root": root, "$entry": entry, "$change": change, "$value": value}
        anchors |= {"$contact": value["contacts"][0], "$msg": value["messages"][0]}
        _apply(anchors, self.noise)
        _apply(anchors, self.mutations)
        return root


_WHATSAPP_PATHS: tuple[tuple[str, ...], ...] = (
    ("$root", "object"),
    ("$root", "entry"),
    ("$entry", "changes"),
    ("$change", "field"),
    ("$change", "value"),
    ("$value", "metadata"),
    ("$value", "metadata", "phone_number_id"),
    ("$value", "contacts"),
    ("$value", "messages"),
    ("$value", "statuses"),
    ("$contact", "wa_id"),
    ("$contact", "profile"),
    ("$msg", "from"),
    ("$msg", "id"),
    ("$msg", "timestamp"),
    ("$msg", "type"),
    ("$msg", "text"),
    ("$msg", "context"),
)
whatsapp_noise = _noise(
    (
        ("$root", "x_count"),
        ("$entry", "time"),
        ("$value", "x_count"),
        ("$contact", "x_count"),
        ("$msg", "x_count"),
    )
)
whatsapp_mutations = st.lists(
    st.tuples(
        st.sampled_from(_WHATSAPP_PATHS),
        st.one_of(
            st.just(DROP),
            odd_values,
            fuzz_text,
            st.sampled_from(["9" * 30, "-1", "1e10", "99999999999999999999", "text", "system"]),
            st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.one_of(fuzz_text, odd_values),
                        "status": st.sampled_from(["sent", "failed", "x"]),
                    }
                ),
                max_size=2,
            ),
            # A message's context: forwarded (often), or replying to another.
            st.fixed_dictionaries(
                {},
                optional={
                    "forwarded": json_scalars,
                    "frequently_forwarded": json_scalars,
                    "id": st.one_of(fuzz_text, odd_values),
                    "from": fuzz_text,
                },
            ),
        ),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


@st.composite
def whatsapp_cases(draw: st.DrawFn) -> WhatsAppCase:
    return WhatsAppCase(
        kind=draw(
            st.sampled_from(["text", "text", "text", "button", "interactive", "image", "reaction"])
        ),
        text=draw(message_texts(PLATFORM_TEXT_LIMIT)),
        name=draw(st.one_of(plain_text, fuzz_text)),
        mutations=draw(st.one_of(st.just(()), st.just(()), whatsapp_mutations)),
        noise=draw(whatsapp_noise),
    )

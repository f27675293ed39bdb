"""What a hostile web chat client sends: message bodies, content types, Authorization
headers, socket tokens and socket frames."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.fuzz.strategies import (
    FIXED_JUNK,
    Blob,
    LongText,
    any_int,
    fuzz_text,
    json_scalars,
    json_values,
    junk_bodies,
    message_texts,
    to_json,
    weighted,
)

valid_client_ids = st.from_regex(r"[A-Za-z0-9_.:-]{1,100}", fullmatch=True)


@st.composite
def client_ids(draw: st.DrawFn) -> Any:
    kind = draw(weighted({"valid": 3, "text": 1, "other": 1}))
    if kind == "valid":
        return draw(valid_client_ids)
    return draw(fuzz_text if kind == "text" else json_scalars)


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    """A message's fields, mostly well typed: text, and perhaps a client id."""
    text = draw(weighted({"text": 9, "other": 1}))
    message = {"text": draw(message_texts() if text == "text" else json_scalars)}
    if draw(st.booleans()):
        message["client_id"] = draw(client_ids())
    return message


@st.composite
def webchat_bodies(draw: st.DrawFn) -> bytes:
    """Bodies for `POST /webchat/messages`: mostly message-shaped, some junk."""
    shape = draw(weighted({"message": 7, "junk": 2, "no text": 1}))
    if shape == "junk":
        return draw(junk_bodies)
    body: dict[str, Any] = {}
    if shape == "message":
        body = draw(_message())
    elif draw(st.booleans()):
        body["client_id"] = draw(client_ids())
    if draw(st.integers(0, 7)) == 0:
        body[draw(fuzz_text)] = draw(json_values)
    return to_json(body, ascii_only=draw(st.booleans()))


content_types = st.sampled_from(
    ["application/json"] * 8 + ["application/json; charset=utf-8", "text/plain", None]
)


def field_value(raw: bytes) -> bytes:
    """`raw` as an HTTP field value may hold it: visible ASCII, space, tab and the
    obs-text bytes 0x80-0xFF. Control characters are the HTTP parser's to refuse,
    before the app sees them."""
    return bytes(c for c in raw if (c >= 0x20 and c != 0x7F) or c == 0x09).strip(b" \t")


header_bytes = st.binary(max_size=60).map(field_value)

# Shaped like a visitor token (prefix, visitor id, signature), signed by nobody.
TOKEN_LIKE = "wc1.0f1e2d3c4b5a69788796a5b4c3d2e1f0.Q2hlY2tzdW0tdGhhdC1pcy1ub3QtcmVhbC0wMTIzNDU2Nzg"


@st.composite
def authorization_headers(draw: st.DrawFn) -> bytes:
    """Odd Authorization values, some close to a token."""
    token = TOKEN_LIKE.encode()
    choice = draw(st.integers(0, 6))
    if choice == 0:
        value = draw(header_bytes)
    elif choice == 1:
        value = b"Bearer " + draw(header_bytes)
    elif choice == 2:  # non-ASCII bytes spliced in
        at = draw(st.integers(0, len(token)))
        odd = draw(st.binary(min_size=1, max_size=4).map(lambda b: bytes(0x80 | c for c in b)))
        value = b"Bearer " + token[:at] + odd + token[at:]
    elif choice == 3:  # one character changed
        at = draw(st.integers(0, len(token) - 1))
        swap = draw(st.sampled_from([b"A", b"\xe9", b"~", b"."]))
        value = b"Bearer " + token[:at] + swap + token[at + 1 :]
    elif choice == 4:
        scheme = draw(st.sampled_from([b"Basic", b"bearer\xa0", b"B\xe9arer", b"", b"Token"]))
        value = scheme + b" " + token
    elif choice == 5:
        value = b"Bearer " + draw(fuzz_text).encode("utf-8", "surrogatepass")
    else:
        value = b"Bearer wc1." + draw(header_bytes) + b"." + draw(header_bytes)
    return field_value(value)


@st.composite
def odd_tokens(draw: st.DrawFn) -> str:
    """`?token=` values of a web chat socket that no visitor has."""
    kind = draw(weighted({"spliced": 2, "text": 1, "bytes": 1}))
    if kind == "text":
        return draw(fuzz_text)
    if kind == "bytes":
        return draw(header_bytes).decode("latin-1")
    at = draw(st.integers(0, len(TOKEN_LIKE) - 1))
    odd = draw(st.sampled_from(["\u00e9", "\u202e", "\x00", "\ud800", "\u03a9", "A", "%", "&"]))
    return TOKEN_LIKE[:at] + odd + TOKEN_LIKE[at + 1 :]


@st.composite
def socket_frames(draw: st.DrawFn) -> str | bytes:
    """Client frames: junk JSON, wrong shapes, extra fields, huge ints, binary."""
    kind = draw(
        weighted({"message": 5, "resume": 2, "binary": 1, "junk": 1, "text": 1, "other": 1})
    )
    if kind == "binary":
        return draw(st.one_of(st.binary(max_size=40), st.sampled_from(FIXED_JUNK)).map(Blob))
    if kind == "junk":  # as text: invalid UTF-8 becomes U+FFFD on the way
        return LongText(draw(junk_bodies).decode("utf-8", "replace"))
    if kind == "text":
        return draw(fuzz_text).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    frame: dict[str, Any] = {}
    if kind == "message":
        frame = {"type": "message"} | draw(_message())
    elif kind == "resume":
        number = draw(weighted({"int": 4, "other": 1}))
        frame = {"type": "resume", "after_seq": draw(any_int if number == "int" else json_scalars)}
    elif draw(st.booleans()):
        frame["type"] = draw(st.one_of(st.sampled_from(["dance", "", "MESSAGE"]), json_scalars))
    if draw(st.integers(0, 7)) == 0:
        frame[draw(st.sampled_from(["after_seq", "text", "client_id", "x"]))] = draw(json_values)
    return LongText(to_json(frame).decode("utf-8"))  # ASCII: surrogates travel escaped

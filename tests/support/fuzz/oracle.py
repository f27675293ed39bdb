"""What the gateway must answer to a web chat body, a socket frame or a query value,
worked out the way an RFC 8259 JSON reader and the API's documented rules see it."""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpx

from tests.support.fuzz.cleaning import storable
from tests.support.fuzz.limits import INT64_MAX, INT64_MIN, MAX_BODY_BYTES, MAX_MESSAGE_CHARS


def is_4xx(status: int) -> bool:
    return 400 <= status < 500


def assert_json_error(response: httpx.Response, what: object) -> None:
    """A refusal from our own API is JSON: `{"error": {"code", "message"}}` from the
    operator API, a `detail` elsewhere (its echo must encode)."""
    try:
        body = response.json()
    except ValueError as exc:
        raise AssertionError(
            f"{response.status_code} for {what!r} is not JSON: {response.content[:200]!r}"
        ) from exc
    assert isinstance(body, dict), body
    if "error" in body:
        assert isinstance(body["error"]["code"], str), body
        assert isinstance(body["error"]["message"], str), body
    else:
        assert "detail" in body, body


class Verdict(Enum):
    ACCEPT = "accept"
    REJECT = "reject"
    EITHER = "either"  # a stricter or a more lenient server are both right


@dataclass(frozen=True)
class Expect:
    verdict: Verdict
    why: str
    # For REJECT: the statuses allowed (empty: any 4xx).
    statuses: frozenset[int] = frozenset()
    # For ACCEPT/EITHER: the text that must be stored.
    text: str | None = None

    def allows(self, status: int) -> bool:
        if self.verdict is Verdict.ACCEPT:
            return status == 200
        if self.verdict is Verdict.REJECT:
            return status in self.statuses if self.statuses else is_4xx(status)
        return status == 200 or is_4xx(status)


def reject(why: str, *statuses: int) -> Expect:
    return Expect(Verdict.REJECT, why, frozenset(statuses))


# -- JSON the way an RFC 8259 reader sees it --------------------------------------------


class NotJSON(ValueError):
    pass


@dataclass
class JSONNotes:
    duplicate_keys: bool = False
    big_ints: list[int] = field(default_factory=list)
    lenient_encoding: bool = False  # not UTF-8, yet Python's json reads it (BOM, UTF-16)


def _decoded(raw: bytes | str, notes: JSONNotes) -> str:
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            try:
                json.loads(raw)
            except (ValueError, RecursionError):
                raise NotJSON("not UTF-8") from None
            notes.lenient_encoding = True
            text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    if text.startswith("\ufeff"):
        notes.lenient_encoding = True
        text = text[1:]
    return text


def strict_json(raw: bytes | str) -> tuple[Any, JSONNotes]:
    """Parse as RFC 8259 JSON: UTF-8, no NaN/Infinity, no raw control characters."""
    notes = JSONNotes()
    text = _decoded(raw, notes)

    def constant(name: str) -> Any:
        raise NotJSON(f"{name} is not JSON")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            notes.duplicate_keys = True
        return dict(items)

    def integer(digits: str) -> int:
        value = int(digits)
        if not INT64_MIN <= value <= INT64_MAX:
            notes.big_ints.append(value)
        return value

    try:
        value = json.loads(
            text, parse_constant=constant, object_pairs_hook=pairs, parse_int=integer
        )
    except RecursionError:
        raise NotJSON("nested too deeply") from None
    except NotJSON:
        raise
    except ValueError as exc:
        raise NotJSON(str(exc)) from None
    return value, notes


# -- what the web chat API must answer ------------------------------------------------------

_CLIENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def _client_id_verdict(client_id: Any) -> Verdict:
    if client_id is None:
        return Verdict.ACCEPT
    if not isinstance(client_id, str):
        return Verdict.REJECT
    if client_id.isascii():
        return Verdict.ACCEPT if _CLIENT_ID.fullmatch(client_id) else Verdict.REJECT
    if not storable(client_id) or not 1 <= len(client_id) <= 100:
        return Verdict.REJECT
    return Verdict.EITHER  # \w differs between regex engines outside ASCII


def _text_verdict(text: Any) -> tuple[Verdict, str]:
    if not isinstance(text, str):
        return Verdict.REJECT, "text is not a string"
    if not storable(text):
        return Verdict.REJECT, "NUL, lone surrogate or non-character in text"
    if not text.strip():
        return Verdict.REJECT, "blank text"
    if len(text) > MAX_MESSAGE_CHARS:
        return Verdict.REJECT, "text too long"
    return Verdict.ACCEPT, "a message"


def _message_verdict(message: dict[str, Any]) -> tuple[Verdict, str]:
    """A message's text and client id, as a body or a frame carries them."""
    text_verdict, why = _text_verdict(message.get("text"))
    client_id_verdict = _client_id_verdict(message.get("client_id"))
    if text_verdict is Verdict.REJECT:
        return Verdict.REJECT, why
    if client_id_verdict is Verdict.REJECT:
        return Verdict.REJECT, "bad client_id"
    return client_id_verdict, why


def expect_send(raw: bytes, content_type: str | None) -> Expect:
    """What `POST /webchat/messages` must answer to this body."""
    if len(raw) > MAX_BODY_BYTES:
        return reject("body over the limit", 413)
    try:
        body, notes = strict_json(raw)
    except NotJSON as exc:
        return reject(f"not JSON ({exc})", 400, 422)
    expect = _expect_send(body, notes, content_type)
    if notes.lenient_encoding and expect.verdict is Verdict.REJECT:
        return reject(expect.why)  # a reader that refuses a BOM or UTF-16 may say 400
    return expect


def _expect_send(body: Any, notes: JSONNotes, content_type: str | None) -> Expect:
    if notes.big_ints:
        return reject("integer past 64 bits", 422)
    if not isinstance(body, dict):
        return reject("not an object", 422)
    if set(body) - {"text", "client_id"} or "text" not in body:
        return reject("unknown or missing fields", 422)
    verdict, why = _message_verdict(body)
    if verdict is Verdict.REJECT:
        return reject(why, 422)
    # Without a JSON content type a server may or may not read the body as JSON.
    json_type = content_type is not None and content_type.split(";")[0] == "application/json"
    if notes.duplicate_keys or notes.lenient_encoding or not json_type:
        verdict = Verdict.EITHER
    return Expect(verdict, why, text=body["text"])


# -- what the web chat socket must answer ---------------------------------------------------


class FrameVerdict(Enum):
    # ACK and ERROR are named for the frame the client gets.
    ACK = "ack"  # stored once, acknowledged
    ERROR = "error"  # an error frame, nothing stored
    RESUMED = "resumed"  # a resume: no error frame
    EITHER = "either"  # an ack or an error frame, or a resume


@dataclass(frozen=True)
class FrameExpect:
    verdict: FrameVerdict
    why: str
    text: str | None = None

    @property
    def answered(self) -> bool:
        """Does the client get an ack or an error frame? (A resume, or what a lenient
        reader may take for one, gets neither.)"""
        if self.verdict is FrameVerdict.EITHER:
            return self.text is not None
        return self.verdict is not FrameVerdict.RESUMED


def expect_frame(raw: str | bytes) -> FrameExpect:
    """What the socket must do with one client frame."""
    if isinstance(raw, bytes):
        return FrameExpect(FrameVerdict.ERROR, "a binary frame")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return FrameExpect(FrameVerdict.ERROR, "frame over the body limit")
    try:
        frame, notes = strict_json(raw)
    except NotJSON as exc:
        return FrameExpect(FrameVerdict.ERROR, f"not JSON ({exc})")
    if not isinstance(frame, dict) or frame.get("type") not in ("message", "resume"):
        return FrameExpect(FrameVerdict.ERROR, "not a known frame")
    lenient = bool(set(frame) - {"type", "text", "client_id", "after_seq"})
    lenient = lenient or notes.duplicate_keys
    if frame["type"] == "resume":
        return _expect_resume(frame, lenient)
    verdict, why = _message_verdict(frame)
    if verdict is Verdict.REJECT:
        return FrameExpect(FrameVerdict.ERROR, why)
    if verdict is Verdict.EITHER or lenient or notes.big_ints or "after_seq" in frame:
        return FrameExpect(FrameVerdict.EITHER, "a message with extras", frame["text"])
    return FrameExpect(FrameVerdict.ACK, why, frame["text"])


def _expect_resume(frame: dict[str, Any], lenient: bool) -> FrameExpect:
    after = frame.get("after_seq")
    # 1e400 reads as an infinite float: no reader can take that as a number.
    finite = not isinstance(after, float) or math.isfinite(after)
    if isinstance(after, bool) or (isinstance(after, (float, str)) and finite):
        return FrameExpect(FrameVerdict.EITHER, "after_seq of a coercible type")
    if not isinstance(after, int) or not 0 <= after <= INT64_MAX:
        return FrameExpect(FrameVerdict.ERROR, f"after_seq {after!r}")
    if lenient or "text" in frame or "client_id" in frame:
        return FrameExpect(FrameVerdict.EITHER, "resume with extra fields")
    return FrameExpect(FrameVerdict.RESUMED, "a resume")


# -- query and path values ------------------------------------------------------------------


def int_verdict(value: str, low: int, high: int) -> Verdict:
    """Is this query value an int in [low, high]: ACCEPT, REJECT, or EITHER (coercible)."""
    if re.fullmatch(r"-?[0-9]{1,30}", value):
        return Verdict.ACCEPT if low <= int(value) <= high else Verdict.REJECT
    return Verdict.EITHER


def uuid_verdict(value: str) -> Verdict:
    """A UUID in its canonical form, one a lenient reader may take, or none."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return Verdict.REJECT
    return Verdict.ACCEPT if str(parsed) == value.lower() else Verdict.EITHER


def query_verdict(params: dict[str, str], ints: dict[str, tuple[int, int]]) -> Verdict:
    """A query's verdict: each of `ints` an int within its bounds, any other value a
    UUID; any value refused refuses it, any uncertain leaves it uncertain."""
    verdicts = [
        int_verdict(value, *ints[name]) if name in ints else uuid_verdict(value)
        for name, value in params.items()
    ]
    for verdict in (Verdict.REJECT, Verdict.EITHER):
        if verdict in verdicts:
            return verdict
    return Verdict.ACCEPT


def rest_statuses(query: Verdict, session: Verdict, found: bool) -> set[int]:
    """What the operator API may answer: from the query values' verdict, the session
    id's (ACCEPT for the listing), and whether that session exists. Values are checked
    before the session is looked up."""
    if query is Verdict.REJECT:
        return {422} if session is Verdict.ACCEPT else {404, 422}
    if session is Verdict.REJECT:
        return {404, 422}
    if Verdict.EITHER in (query, session):
        return {200, 404, 422}
    return {200} if found else {404}

"""Hostile input at every edge, on SQLite and Postgres: the web chat API and socket, signed
Telegram and WhatsApp webhooks, and the operator API.

Every example checks: no 5xx and nothing in the server's error log; a refusal is a 4xx
that stores nothing; an accepted message is stored exactly once (platform text cleaned:
NUL removed, lone surrogates U+FFFD) and answered. Every test ends by checking the
gateway is still healthy and still answers on every channel. Example counts are small
and fixed (derandomized) so CI stays fast and reproducible; raise them locally with
PARLEY_TEST_FUZZ_SCALE.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.fakes.graph_api import PHONE_NUMBER_ID, signed
from tests.fakes.telegram_api import WEBHOOK_SECRET
from tests.support.fuzz import (
    DROP,
    INT64_MAX,
    MAX_BODY_BYTES,
    TOKEN_LIKE,
    Blob,
    FrameVerdict,
    FuzzServer,
    LongText,
    Stored,
    TelegramCase,
    Verdict,
    WhatsAppCase,
    as_received,
    assert_json_error,
    authorization_headers,
    check_clean_name,
    clean,
    cleaned_equal,
    cleaned_within,
    content_types,
    examples,
    expect_frame,
    expect_send,
    fresh_id,
    fuzz_server,
    fuzz_text,
    header_bytes,
    int_param,
    is_4xx,
    junk_bodies,
    odd_tokens,
    payload_bytes,
    query_string,
    query_value,
    socket_frames,
    telegram_cases,
    unsafe_text,
    webchat_bodies,
    whatsapp_cases,
)
from tests.support.harness import ADMIN_TOKEN
from tests.support.platforms import SECRET_HEADER

ADMIN = [(b"authorization", f"Bearer {ADMIN_TOKEN}".encode())]
FRAME_SECONDS = 10.0
PLATFORM_TEXT_LIMIT = 4096


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[FuzzServer]:
    with fuzz_server(database_url, tmp_path) as running:
        yield running
        running.assert_healthy()


@dataclass(frozen=True)
class Seeded:
    token: str
    conversation_id: uuid.UUID


@pytest.fixture
def seeded(server: FuzzServer) -> Seeded:
    """A visitor with one answered message (seq 1 and 2)."""
    token, conversation_id = server.visitor()
    response = server.call(server.gw.send(token, "seed"))
    assert response.status_code == 200, response.text
    return Seeded(token, conversation_id)


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


# -- web chat HTTP ---------------------------------------------------------------------------


@examples(50)
@given(raw=webchat_bodies(), content_type=content_types)
@example(raw=Blob(b'{"text": "a\\u0000b"}'), content_type="application/json")
@example(raw=Blob(b'{"text": "\\ud800 lone"}'), content_type="application/json")
@example(raw=Blob(b'{"text": NaN}'), content_type="application/json")
@example(raw=Blob(b'{"text": "hi", "client_id": Infinity}'), content_type="application/json")
@example(
    raw=Blob(b'{"text": "hi", "client_id": 18446744073709551616}'), content_type="application/json"
)
@example(raw=Blob(b"[" * 200_000), content_type="application/json")
@example(raw=Blob(b'{"text": "\xff\xfe"}'), content_type="application/json")
@example(raw=Blob(b'{"text": "\\ufffe\\uffff\\ufdd0"}'), content_type="application/json")
@example(raw=Blob('{"text": "\u202egnp.exe"}'.encode()), content_type="application/json")
@example(raw=Blob(b'{"text": "/status", "client_id": "c1"}'), content_type="application/json")
@example(raw=Blob(b'{"text": "' + b"x" * 300_000 + b'"}'), content_type="application/json")
def test_web_chat_message_bodies(server: FuzzServer, raw: bytes, content_type: str | None) -> None:
    expect = expect_send(raw, content_type)
    token, conversation_id = server.visitor()
    mark = server.last_message_id()
    server.begin((raw, content_type))
    headers = bearer(token)
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    response = server.request("POST", "/webchat/messages", content=raw, headers=headers)

    what = (raw[:300], content_type)
    server.assert_not_5xx(response, what)
    assert expect.allows(response.status_code), (
        f"{response.status_code} for {what!r}, expected {expect}: {response.text[:300]!r}"
    )
    stored = server.incoming_since(mark)
    if response.status_code == 200:
        assert [(m.conversation_id, m.role, m.text) for m in stored] == [
            (conversation_id, "user", expect.text)
        ], what
        body = response.json()
        assert body["message"]["text"] == expect.text
        assert body["reply"] is not None
        server.wait_until_answered(stored[0])
    else:
        assert_json_error(response, what)
        assert stored == [], f"refused with {response.status_code} but stored {stored}"
    # What the visitor sees: the message once, or nothing.
    texts = [m["text"] for m in server.call(server.gw.history(token)) if m["role"] == "user"]
    assert texts == ([expect.text] if response.status_code == 200 else []), what
    server.assert_no_errors(what)


@examples(25)
@given(value=authorization_headers())
@example(value=b"Bearer " + TOKEN_LIKE.encode()[:-1] + b"\xe9")
@example(value=b"Bearer wc1.\xff.\xfe")
@example(value=b"B\xe9arer " + TOKEN_LIKE.encode())
def test_odd_authorization_headers_are_refused(server: FuzzServer, value: bytes) -> None:
    mark = server.last_message_id()
    server.begin(value)
    headers = [(b"authorization", value), (b"content-type", b"application/json")]
    responses = [
        server.request("POST", "/webchat/messages", content=b'{"text": "hi"}', headers=headers),
        server.request("GET", "/webchat/messages", headers=headers),
        server.request("GET", "/api/v1/sessions", headers=headers),
    ]
    for response in responses:
        server.assert_not_5xx(response, value)
        assert response.status_code in (400, 401), (value, response.status_code, response.text)
        assert_json_error(response, value)
    assert server.incoming_since(mark) == []
    server.assert_no_errors(value)


@examples(30)
@given(params=st.fixed_dictionaries({}, optional={"after_seq": query_value, "limit": query_value}))
@example(params={"after_seq": str(2**31)})
@example(params={"after_seq": str(INT64_MAX)})
@example(params={"after_seq": str(INT64_MAX + 1)})
@example(params={"after_seq": "9" * 400, "limit": "NaN"})
@example(params={"limit": "\x00"})
def test_web_chat_history_queries(
    server: FuzzServer, seeded: Seeded, params: dict[str, str]
) -> None:
    bounds = {"after_seq": (0, INT64_MAX), "limit": (1, 500)}
    verdicts = [int_param(value, *bounds[name]) for name, value in params.items()]
    server.begin(params)
    url = "/webchat/messages" + ("?" + query_string(params) if params else "")
    response = server.request("GET", url, headers=bearer(seeded.token))

    server.assert_not_5xx(response, params)
    if Verdict.REJECT in verdicts:
        assert response.status_code == 422, (params, response.text)
    elif Verdict.EITHER in verdicts:
        assert response.status_code in (200, 422), (params, response.text)
    else:
        assert response.status_code == 200, (params, response.text)
    if response.status_code == 200:
        after = int(params.get("after_seq", "0")) if Verdict.EITHER not in verdicts else None
        seqs = [m["seq"] for m in response.json()["messages"]]
        if after is not None:
            assert seqs == [s for s in (1, 2) if s > after][: int(params.get("limit", "100"))]
    else:
        assert_json_error(response, params)
    server.assert_no_errors(params)


# -- web chat socket ---------------------------------------------------------------------------


def frames_until(
    server: FuzzServer,
    ws: ClientConnection,
    done: Callable[[dict[str, Any]], bool],
    what: object,
) -> list[dict[str, Any]]:
    """Frames received until one satisfies `done` (included); fails on a timeout or a
    closed socket, listing what came."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + FRAME_SECONDS
    while True:
        try:
            raw = ws.recv(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise AssertionError(f"no expected frame after {what!r}; got {frames}") from None
        except ConnectionClosed as closed:
            problem = f"the socket closed after {what!r} ({closed}); frames before: {frames}"
            raise server.failure(problem) from None
        assert isinstance(raw, str), f"binary frame from the server: {raw!r}"
        frame = json.loads(raw)
        assert isinstance(frame, dict), frame
        frames.append(frame)
        if done(frame):
            return frames


def _decisive(frame: dict[str, Any]) -> bool:
    return frame.get("type") in ("ack", "error")


@examples(40)
@given(frame=socket_frames())
@example(frame=Blob(b"\x00\xff"))
@example(frame=Blob(b'{"type": "resume", "after_seq": 0}'))
@example(frame='{"type": "resume", "after_seq": 18446744073709551616}')
@example(frame='{"type": "resume", "after_seq": NaN}')
@example(frame=LongText("[" * 200_000))
@example(frame='{"type": "message", "text": "a\\u0000"}')
@example(frame='{"type": "message", "text": "\\udc00"}')
@example(frame='{"type": "message", "text": "\u202eok", "client_id": "k1"}')
@example(frame='{"type": "message", "text": "hi", "extra": 18446744073709551616}')
@example(frame='{"type": "message", "text": "/status"}')
@example(frame=LongText('{"type": "message", "text": "' + "x" * 300_000 + '"}'))
def test_web_chat_socket_survives_bad_frames(server: FuzzServer, frame: str | bytes) -> None:
    expect = expect_frame(frame)
    what = frame[:300]
    token, conversation_id = server.visitor()
    assert server.call(server.gw.send(token, "seed")).status_code == 200
    mark = server.last_message_id()
    server.begin(frame)

    with ws_connect(server.ws_url(token), open_timeout=10, close_timeout=5) as ws:
        ws.send(frame)
        seen: list[dict[str, Any]] = []
        acked: dict[str, Any] | None = None
        waits_for_answer = expect.verdict is not FrameVerdict.RESUMED and (
            expect.verdict is not FrameVerdict.EITHER or expect.text is not None
        )
        if waits_for_answer:
            seen = frames_until(server, ws, _decisive, what)
            answer = seen[-1]
            if expect.verdict is FrameVerdict.ACK:
                assert answer["type"] == "ack", (what, expect.why, seen)
            if expect.verdict is FrameVerdict.ERROR:
                assert answer["type"] == "error", (what, expect.why, seen)
            if answer["type"] == "error":
                assert isinstance(answer.get("detail"), str), answer
                assert answer["detail"], answer
            else:
                acked = answer
                assert answer["seq"] == 3, answer
                # The turn it started (a reply, or a command's answer) ends before the
                # next example begins.
                seen += frames_until(
                    server, ws, lambda f: f.get("type") == "message" and f.get("seq") == 4, what
                )
        # Still usable: a resume brings the conversation back from its first message.
        ws.send('{"type": "resume", "after_seq": 0}')
        seen += frames_until(
            server, ws, lambda f: f.get("type") == "message" and f.get("seq") == 1, what
        )
        if expect.verdict is FrameVerdict.RESUMED:
            assert [f for f in seen if f.get("type") == "error"] == [], (what, seen)
        assert acked is not None or [f for f in seen if f.get("type") == "ack"] == [], seen

    stored = server.incoming_since(mark)
    if acked is None:
        assert stored == [], f"no ack for {what!r} but stored {stored}"
    else:
        assert [(m.conversation_id, m.seq, m.text) for m in stored] == [
            (conversation_id, 3, expect.text)
        ], (what, stored)
        server.wait_until_answered(stored[0])
    texts = [m["text"] for m in server.call(server.gw.history(token)) if m["role"] == "user"]
    assert texts == ["seed"] + ([] if acked is None else [expect.text]), what
    server.assert_no_errors(what)


@examples(20)
@given(odd=odd_tokens())
@example(odd=TOKEN_LIKE[:-1] + "\u00e9")
@example(odd=TOKEN_LIKE[:-1] + "\ud800")
@example(odd="wc1.\x00.\x00")
def test_web_chat_socket_refuses_odd_tokens(server: FuzzServer, odd: str) -> None:
    server.begin(odd)
    url = (
        server.url.replace("http", "ws", 1)
        + "/webchat/ws?token="
        + quote(odd.encode("utf-8", "surrogatepass"), safe="")
    )
    with ws_connect(url, open_timeout=10, close_timeout=5) as ws:
        [refusal] = frames_until(server, ws, lambda _: True, odd)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=FRAME_SECONDS)
    assert refusal["type"] == "error", refusal
    assert refusal["code"] == "unauthorized", refusal
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401, (odd, closed.value)
    server.assert_no_errors(odd)


# -- signed platform webhooks -------------------------------------------------------------------


def _platform_text_is_definite(text: str) -> bool:
    """Text a connector must store as it came (cleaned): not blank once cleaned, not a
    command, within the platform's length."""
    cleaned = clean(text)
    return (
        bool(cleaned.strip())
        and not cleaned.lstrip().startswith("/")
        and len(as_received(text).encode("utf-16-le", "surrogatepass")) // 2 <= PLATFORM_TEXT_LIMIT
    )


def _check_platform_message(
    server: FuzzServer,
    response_status: int,
    stored: list[Stored],
    *,
    well_shaped: bool,
    definite: bool,
    what: object,
) -> None:
    """Shared rules for a signed webhook: well-shaped → 200; a malformed shape may get
    a 4xx, never a 5xx; stored at most once, clean, and answered."""
    if well_shaped:
        assert response_status == 200, what
    else:
        assert response_status == 200 or is_4xx(response_status), (response_status, what)
    if is_4xx(response_status):
        assert stored == [], f"refused with {response_status} but stored {stored}"
    if well_shaped and definite:
        assert len(stored) == 1, (what, stored)
    assert len(stored) <= 1, (what, stored)
    for message in stored:
        assert not unsafe_text(message.text), f"stored unclean text {message.text!r}"
        assert not unsafe_text(message.author_name), f"unclean name {message.author_name!r}"
        if message.role == "user":
            server.wait_until_answered(message)


@examples(40)
@given(case=telegram_cases(), ascii_only=st.booleans())
@example(case=TelegramCase("text", "a\x00b", "Ann", None, ()), ascii_only=True)
@example(case=TelegramCase("text", "\ud800 lone", "Ann", None, ()), ascii_only=True)
@example(case=TelegramCase("text", "\u202e\ufffe\U0010ffff", "Ann", None, ()), ascii_only=False)
@example(case=TelegramCase("text", "hi", "\x00", None, ()), ascii_only=True)
@example(case=TelegramCase("text", "hi", "Ann\ud800", "Lee\x00", ()), ascii_only=True)
@example(case=TelegramCase("caption", "a\x00\udfff", "Ann", None, ()), ascii_only=True)
@example(case=TelegramCase("edit", "b\x00", "Ann", None, ()), ascii_only=True)
@example(case=TelegramCase("text", "hi", "Ann", None, ((("$msg", "chat"), DROP),)), ascii_only=True)
@example(
    case=TelegramCase("text", "hi", "Ann", None, ((("$msg", "from", "id"), False),)),
    ascii_only=True,
)
@example(
    case=TelegramCase("text", "hi", "Ann", None, ((("$msg", "date"), 10**20),)), ascii_only=True
)
@example(
    case=TelegramCase("text", "hi", "Ann", None, ((("$root", "update_id"), 2**64),)),
    ascii_only=True,
)
def test_signed_telegram_updates_are_stored_clean(
    server: FuzzServer, case: TelegramCase, ascii_only: bool
) -> None:
    body = payload_bytes(case.build(fresh_id()), ascii_only)
    mark = server.last_message_id()
    server.begin((case, ascii_only))
    response = server.call(server.platforms.telegram(body))

    server.assert_not_5xx(response, case)
    stored = server.incoming_since(mark)
    definite = case.kind == "caption" or _platform_text_is_definite(case.text)
    _check_platform_message(
        server,
        response.status_code,
        stored,
        well_shaped=case.well_shaped,
        definite=definite,
        what=case,
    )
    if case.well_shaped and stored:
        [message] = stored
        assert message.channel == "telegram"
        assert message.role == ("event" if case.kind == "edit" else "user"), message
        if case.kind == "caption":
            assert cleaned_within(message.text, case.text, at_end=True), message
        else:
            assert cleaned_equal(message.text, case.text), (message.text, clean(case.text))
        check_clean_name(message.author_name, case.full_name, case)
    server.assert_no_errors(case)


@examples(40)
@given(case=whatsapp_cases(), ascii_only=st.booleans())
@example(case=WhatsAppCase("text", "a\x00b", "Kim", ()), ascii_only=True)
@example(case=WhatsAppCase("text", "\udfff lone", "Kim", ()), ascii_only=True)
@example(case=WhatsAppCase("text", "hi", "\x00\ud800", ()), ascii_only=True)
@example(case=WhatsAppCase("image", "\x00", "Kim", ()), ascii_only=True)
@example(case=WhatsAppCase("reaction", "\ud83d", "Kim", ()), ascii_only=True)
@example(
    case=WhatsAppCase("text", "hi", "Kim", ((("$msg", "timestamp"), "9" * 30),)), ascii_only=True
)
@example(case=WhatsAppCase("text", "hi", "Kim", ((("$msg", "from"), "1555\x00"),)), ascii_only=True)
@example(case=WhatsAppCase("text", "hi", "Kim", ((("$msg", "id"), "w" * 300),)), ascii_only=True)
def test_signed_whatsapp_notifications_are_stored_clean(
    server: FuzzServer, case: WhatsAppCase, ascii_only: bool
) -> None:
    body = payload_bytes(case.build(fresh_id(), PHONE_NUMBER_ID), ascii_only)
    mark = server.last_message_id()
    server.begin((case, ascii_only))
    response = server.call(server.platforms.whatsapp(body))

    server.assert_not_5xx(response, case)
    stored = server.incoming_since(mark)
    # Placeholders (a photo, a reaction) are stored whatever their text.
    definite = case.kind in ("image", "reaction") or _platform_text_is_definite(case.text)
    _check_platform_message(
        server,
        response.status_code,
        stored,
        well_shaped=case.well_shaped,
        definite=definite,
        what=case,
    )
    if case.well_shaped and stored:
        [message] = stored
        assert message.channel == "whatsapp"
        assert message.role == ("event" if case.kind == "reaction" else "user"), message
        if case.kind in ("image", "reaction"):  # a labelled placeholder around the text
            assert cleaned_within(message.text, case.text, at_end=case.kind == "image"), message
        else:
            assert cleaned_equal(message.text, case.text), (message.text, clean(case.text))
        check_clean_name(message.author_name, case.name, case)
    server.assert_no_errors(case)


@examples(30)
@given(raw=junk_bodies, platform=st.sampled_from(["telegram", "whatsapp"]))
@example(raw=Blob(b"[" * 200_000), platform="telegram")
@example(raw=Blob(b"[" * 200_000), platform="whatsapp")
@example(raw=Blob(b'{"update_id": NaN}'), platform="telegram")
@example(raw=Blob(b'{"object": Infinity}'), platform="whatsapp")
@example(raw=Blob(b'{"update_id": 18446744073709551617}'), platform="telegram")
@example(raw=Blob(b"\xff\xfe\x00"), platform="whatsapp")
def test_signed_webhooks_with_junk_bodies_store_nothing(
    server: FuzzServer, raw: bytes, platform: str
) -> None:
    mark = server.last_message_id()
    server.begin((platform, raw[:2000]))
    if platform == "telegram":
        response = server.call(server.platforms.telegram(raw))
    else:
        response = server.call(server.platforms.whatsapp(raw))

    what = (platform, raw[:300])
    server.assert_not_5xx(response, what)
    if len(raw) > MAX_BODY_BYTES:
        assert response.status_code == 413, what
    else:
        assert response.status_code == 200 or is_4xx(response.status_code), what
    assert server.incoming_since(mark) == [], what
    server.assert_no_errors(what)


@examples(15)
@given(value=header_bytes, platform=st.sampled_from(["telegram", "whatsapp"]))
@example(value=WEBHOOK_SECRET.encode()[:-1] + b"\xe9", platform="telegram")
@example(value=b"sha256=\xff\xfe", platform="whatsapp")
@example(value=b"", platform="whatsapp")
def test_webhooks_refuse_odd_credentials(server: FuzzServer, value: bytes, platform: str) -> None:
    update = TelegramCase("text", "forged", "Eve", None, ()).build(fresh_id())
    body = json.dumps(update).encode()
    if platform == "telegram":
        header = SECRET_HEADER.encode()
        genuine = WEBHOOK_SECRET.encode()
    else:
        body, good = signed(
            WhatsAppCase("text", "forged", "Eve", ()).build(fresh_id(), PHONE_NUMBER_ID)
        )
        header = b"x-hub-signature-256"
        genuine = good["X-Hub-Signature-256"].encode()
    if value.strip() == genuine:
        value += b"0"
    mark = server.last_message_id()
    server.begin((platform, value))
    path = f"/webhooks/{platform}"
    headers = [(header, value), (b"content-type", b"application/json")]
    response = server.request("POST", path, content=body, headers=headers)

    server.assert_not_5xx(response, value)
    assert response.status_code in (401, 403), (value, response.status_code)
    assert server.incoming_since(mark) == []
    server.assert_no_errors(value)


# -- operator API -----------------------------------------------------------------------------------


def _uuid_verdict(value: str) -> Verdict:
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return Verdict.REJECT
    return Verdict.ACCEPT if str(parsed) == value.lower() else Verdict.EITHER


rest_params = st.fixed_dictionaries(
    {},
    optional={
        "limit": query_value,
        "offset": query_value,
        "after_seq": query_value,
        "user_id": st.one_of(st.uuids().map(str), fuzz_text),
    },
)


@examples(30)
@given(
    listing=st.booleans(),
    given_params=rest_params,
    session=st.one_of(st.none(), st.uuids().map(str), fuzz_text),
)
@example(listing=True, given_params={"offset": str(INT64_MAX + 1)}, session=None)
@example(listing=True, given_params={"offset": str(2**31), "limit": "500"}, session=None)
@example(listing=False, given_params={"after_seq": str(INT64_MAX)}, session=None)
@example(listing=False, given_params={"after_seq": str(2**64)}, session=None)
@example(listing=False, given_params={}, session="\x00")
@example(listing=True, given_params={"user_id": "\ud800"}, session=None)
def test_rest_api_queries(
    server: FuzzServer,
    seeded: Seeded,
    listing: bool,
    given_params: dict[str, str],
    session: str | None,
) -> None:
    """`session` None: the seeded conversation."""
    if listing:
        bounds = {"limit": (1, 500), "offset": (0, INT64_MAX)}
    else:
        bounds = {"after_seq": (0, INT64_MAX), "limit": (1, 1000)}
    params = {k: v for k, v in given_params.items() if k in bounds or (listing and k == "user_id")}
    verdicts = [
        _uuid_verdict(value) if name == "user_id" else int_param(value, *bounds[name])
        for name, value in params.items()
    ]
    if session is None:
        session = str(seeded.conversation_id)
    path = "/api/v1/sessions"
    if not listing:
        path += f"/{quote(session.encode('utf-8', 'surrogatepass'), safe='')}/messages"
    server.begin((path, params))
    url = path + ("?" + query_string(params) if params else "")
    response = server.request("GET", url, headers=ADMIN)

    what = (url, params)
    server.assert_not_5xx(response, what)
    found = listing or session == str(seeded.conversation_id)
    session_verdict = Verdict.ACCEPT if listing else _uuid_verdict(session)
    if Verdict.REJECT in verdicts:
        allowed = {422} if session_verdict is Verdict.ACCEPT else {404, 422}
    elif session_verdict is Verdict.REJECT:
        allowed = {404, 422}
    elif Verdict.EITHER in verdicts or session_verdict is Verdict.EITHER:
        allowed = {200, 404, 422}
    else:
        allowed = {200} if found else {404}
    assert response.status_code in allowed, (what, response.status_code, response.text[:300])
    if response.status_code == 200:
        body = response.json()
        assert isinstance(body["sessions" if listing else "messages"], list), body
    else:
        assert_json_error(response, what)
    server.assert_no_errors(what)

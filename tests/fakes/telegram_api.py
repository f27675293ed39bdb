"""A fake Telegram Bot API on a real localhost socket.

It speaks the wire format python-telegram-bot uses: methods at `/bot{token}/{method}`,
form-encoded parameters (objects as JSON strings), answers `{"ok": true, "result": …}`
or `{"ok": false, "error_code", "description", "parameters": {"retry_after"}}`. Tests
script failures per method (`TgFail`), read what was sent, feed `getUpdates`, and build
updates shaped like the Bot API documentation's examples.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import serve

TOKEN = "123456789:AAtest-token-that-must-not-leak"
WEBHOOK_SECRET = "test_webhook_secret-0123456789"
BOT_ID = 123456789
BOT_USERNAME = "parley_test_bot"
LIMIT = 4096


@dataclass
class TgFail:
    """The next call of a method fails like Telegram does."""

    status: int
    description: str
    retry_after: int | None = None
    migrate_to_chat_id: int | None = None


def flood(retry_after: int = 1) -> TgFail:
    return TgFail(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after)


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]
    # When it arrived, on the clock the gateway stamps stored messages with.
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class FakeTelegram:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.base_url = ""
        self.calls: list[Call] = []
        self._failures: defaultdict[str, deque[TgFail | None]] = defaultdict(deque)
        self._updates: list[dict[str, Any]] = []
        # Long polls held open now, and polls refused because another client was still
        # polling (Telegram allows one at a time per bot).
        self._polls: set[Request] = set()
        self.conflicts = 0
        self._changed = asyncio.Condition()
        # Messages accepted per chat: a count to wait on without scanning every call.
        self._sent_counts: Counter[int] = Counter()
        self._message_ids = itertools.count(1000)
        # What each message the bot sent shows now, edits included: (chat, id) -> text.
        self.showing: dict[tuple[int, int], str] = {}
        self._entities: dict[tuple[int, int], Any] = {}
        self._closing = False
        # While this is an event not set, sendMessage answers once it is (a slow Telegram).
        self.gate: asyncio.Event | None = None
        # The webhook as setWebhook left it ("" for none), and what Telegram says went
        # wrong with its last post there (a test sets it).
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self.webhook_error: str | None = None
        # Files people sent, by file_id, as `getFile` and the download serve them; the
        # downloads asked, by file path; statuses the next downloads answer instead.
        self.files: dict[str, bytes] = {}
        self.downloads: list[str] = []
        self.download_failures: deque[int] = deque()
        # While this is an event not set, `getFile` answers once it is (a slow Telegram).
        self.files_gate: asyncio.Event | None = None
        self.app = Starlette(
            routes=[
                Route("/bot{token}/{method}", self._method, methods=["GET", "POST"]),
                Route("/file/bot{token}/{path:path}", self._download, methods=["GET"]),
            ]
        )

    # -- for tests --------------------------------------------------------------------

    def fail(self, method: str, *failures: TgFail | None) -> None:
        """Script the next calls of `method`: a failure, or None for a normal answer."""
        self._failures[method].extend(failures)

    def clear_failures(self) -> None:
        self._failures.clear()

    def sent(self, chat_id: int | None = None) -> list[Call]:
        """Messages Telegram accepted, in order (optionally to one chat)."""
        return [
            c
            for c in self.calls
            if c.method == "sendMessage"
            and c.params.get("_accepted")
            and (chat_id is None or c.params["chat_id"] == chat_id)
        ]

    def texts(self, chat_id: int | None = None) -> list[str]:
        return [c.params["text"] for c in self.sent(chat_id)]

    def shown(self, chat_id: int) -> list[str]:
        """What the bot's messages in a chat show now (edits applied), in order."""
        return [text for (chat, _), text in self.showing.items() if chat == chat_id]

    def edits(self, chat_id: int) -> list[Call]:
        """Edits Telegram accepted in a chat, in order."""
        return [
            c
            for c in self.calls_of("editMessageText")
            if c.params.get("_accepted") and int(c.params["chat_id"]) == chat_id
        ]

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def push_update(self, update: dict[str, Any]) -> None:
        async with self._changed:
            self._updates.append(update)
            self._changed.notify_all()

    # The timeout parameter is the agreed API for pipeline tests, hence the noqa.
    async def wait_until(
        self,
        predicate: Callable[[FakeTelegram], bool],
        seconds: float = 15.0,
    ) -> None:
        try:
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: predicate(self))
        except TimeoutError:
            methods = [c.method for c in self.calls]
            raise TimeoutError(f"condition not met; calls so far: {methods}") from None

    async def wait_sent(self, chat_id: int, count: int, seconds: float) -> bool:
        """Wait until `count` messages to `chat_id` were accepted; False on timeout."""
        try:
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: self._sent_counts[chat_id] >= count)
        except TimeoutError:
            return False
        return True

    # -- the API ----------------------------------------------------------------------

    async def _method(self, request: Request) -> JSONResponse:
        if request.path_params["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.path_params["method"]
        try:
            params = await _params(request)
        except ClientDisconnect:
            # The gateway hung up before this was read (a typing indicator stopped as
            # its reply went out): nobody to answer, nothing taken.
            return JSONResponse({}, status_code=499)
        call = Call(method, params)
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        if method == "getUpdates":
            return await self._get_updates(request, params)
        failures = self._failures.get(method)
        failure = failures.popleft() if failures else None
        if failure is not None:
            extra = {}
            if failure.retry_after is not None:
                extra["retry_after"] = failure.retry_after
            if failure.migrate_to_chat_id is not None:
                extra["migrate_to_chat_id"] = failure.migrate_to_chat_id
            return _error(failure.status, failure.description, extra or None)
        handler = {
            "getMe": self._get_me,
            "getFile": self._get_file,
            "setWebhook": self._set_webhook,
            "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._webhook_info,
            "sendChatAction": _true,
            "sendMessage": self._send_message,
            "sendMessageDraft": self._send_draft,
            "editMessageText": self._edit_message,
        }.get(method)
        if handler is None:
            return _error(404, "Not Found")
        if method == "sendMessage" and self.gate is not None:
            await self.gate.wait()
        if method == "getFile" and self.files_gate is not None:
            await self.files_gate.wait()
        response = handler(params)
        async with self._changed:
            if method in ("sendMessage", "editMessageText") and response.status_code == 200:
                params["_accepted"] = True
                if method == "sendMessage":
                    self._sent_counts[params["chat_id"]] += 1
            self._changed.notify_all()
        return response

    def _set_webhook(self, params: dict[str, Any]) -> JSONResponse:
        self.webhook_url = str(params.get("url", ""))
        self.webhook_secret = params.get("secret_token")
        return _true(params)

    def _delete_webhook(self, params: dict[str, Any]) -> JSONResponse:
        self.webhook_url, self.webhook_secret = "", None
        return _true(params)

    def _webhook_info(self, _: dict[str, Any]) -> JSONResponse:
        info: dict[str, Any] = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": 0,
        }
        if self.webhook_error is not None:
            info |= {"last_error_date": 1_700_000_000, "last_error_message": self.webhook_error}
        return _ok(info)

    def _get_file(self, params: dict[str, Any]) -> JSONResponse:
        """As Telegram: a path to download the file from for an hour, and bots get no
        file past 20 MB."""
        file_id = str(params.get("file_id", ""))
        data = self.files.get(file_id)
        if data is None:
            return _error(400, "Bad Request: invalid file_id")
        if len(data) > 20 * 1024 * 1024:
            return _error(400, "Bad Request: file is too big")
        path = f"files/{file_id}"
        return _ok(
            {
                "file_id": file_id,
                "file_unique_id": f"u-{file_id}",
                "file_size": len(data),
                "file_path": path,
            }
        )

    async def _download(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return Response(status_code=401)
        path = request.path_params["path"]
        self.downloads.append(path)
        if self.download_failures:
            return Response(status_code=self.download_failures.popleft())
        data = self.files.get(path.removeprefix("files/"))
        return Response(status_code=404) if data is None else Response(data)

    def _get_me(self, _: dict[str, Any]) -> JSONResponse:
        return _ok(_bot_user())

    def _send_draft(self, params: dict[str, Any]) -> JSONResponse:
        """Bot API 9.5: a private chat only, a non-zero draft id, 1-4096 characters."""
        text = str(params.get("text", ""))
        if int(params.get("chat_id", 0)) <= 0:
            return _error(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if int(params.get("draft_id", 0)) == 0:
            return _error(400, "Bad Request: draft_id must be non-zero")
        if (refused := _text_refused(text, params)) is not None:
            return _error(400, f"Bad Request: {refused}")
        return _true(params)

    def drafts(self, chat_id: int) -> list[Call]:
        """Drafts shown in a chat, in order."""
        return [
            c
            for c in self.calls_of("sendMessageDraft")
            if int(c.params.get("chat_id", 0)) == chat_id
        ]

    def _send_message(self, params: dict[str, Any]) -> JSONResponse:
        text = str(params.get("text", ""))
        if (refused := _text_refused(text, params)) is not None:
            return _error(400, f"Bad Request: {refused}")
        chat_id = int(params["chat_id"])
        params["chat_id"] = chat_id
        message = _message(chat_id, next(self._message_ids), text)
        self.showing[(chat_id, message["message_id"])] = text
        self._entities[(chat_id, message["message_id"])] = params.get("entities")
        return _ok(message)

    def _edit_message(self, params: dict[str, Any]) -> JSONResponse:
        """`editMessageText` of a message the bot sent: the same checks as a send, and
        Telegram's answers to an unknown message and to an edit that changes nothing."""
        text = str(params.get("text", ""))
        key = (int(params.get("chat_id", 0)), int(params.get("message_id", 0)))
        params["chat_id"] = key[0]
        if key not in self.showing:
            return _error(400, "Bad Request: message to edit not found")
        if (refused := _text_refused(text, params)) is not None:
            return _error(400, f"Bad Request: {refused}")
        if self.showing[key] == text and self._entities[key] == params.get("entities"):
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message",
            )
        self.showing[key] = text
        self._entities[key] = params.get("entities")
        return _ok(_message(*key, text) | {"edit_date": 1_700_000_100})

    async def _get_updates(self, request: Request, params: dict[str, Any]) -> JSONResponse:
        # A poll whose client hung up (a replica that stopped) is held here until its
        # timeout, yet polls nothing: only one whose client still waits is a conflict.
        if [poll for poll in self._polls if not await poll.is_disconnected()]:
            # What Telegram answers a second bot instance polling at the same time.
            self.conflicts += 1
            return JSONResponse(
                {
                    "ok": False,
                    "error_code": 409,
                    "description": "Conflict: terminated by other getUpdates request; "
                    "make sure that only one bot instance is running",
                },
                status_code=409,
            )
        self._polls.add(request)
        try:
            return await self._poll(params)
        finally:
            self._polls.discard(request)

    async def _poll(self, params: dict[str, Any]) -> JSONResponse:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)

        def pending() -> list[dict[str, Any]]:
            return [u for u in self._updates if u["update_id"] >= offset]

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: bool(pending()) or self._closing)
        return _ok(pending())

    async def close(self) -> None:
        """End held long polls, so the server can shut down."""
        async with self._changed:
            self._closing = True
            self._changed.notify_all()


async def _params(request: Request) -> dict[str, Any]:
    body = (await request.body()).decode()
    if request.headers.get("content-type", "").startswith("application/json"):
        loaded: dict[str, Any] = json.loads(body or "{}")
        return loaded
    params: dict[str, Any] = {}
    for key, value in parse_qsl(body):
        try:
            params[key] = json.loads(value) if key != "text" else value
        except ValueError:
            params[key] = value
    return params


def _text_refused(text: str, params: dict[str, Any]) -> str | None:
    """Why Telegram would refuse `text` with these parameters (None: it takes it)."""
    if not text:
        return "message text is empty"
    if len(text.encode("utf-16-le")) // 2 > LIMIT:
        return "message is too long"
    if "parse_mode" in params:
        return "this fake expects plain text"
    wrong = _entities_wrong(text, params.get("entities"))
    return None if wrong is None else f"can't parse entities: {wrong}"


def _entities_wrong(text: str, entities: Any) -> str | None:
    """What is wrong with a message's entities, as Telegram checks them (offsets and
    lengths in UTF-16 code units, inside the text); None if nothing."""
    if entities is None:
        return None
    if isinstance(entities, str):
        entities = json.loads(entities)
    size = len(text.encode("utf-16-le")) // 2
    for entity in entities:
        offset, length = int(entity.get("offset", -1)), int(entity.get("length", 0))
        if not entity.get("type") or offset < 0 or length <= 0 or offset + length > size:
            return f"entity {entity} is outside a text of {size} UTF-16 units"
    return None


def _message(chat_id: int, message_id: int, text: str) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "from": _bot_user(),
        "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
        "date": 1_700_000_000,
        "text": text,
    }


def _bot_user() -> dict[str, Any]:
    return {"id": BOT_ID, "is_bot": True, "first_name": "Parley", "username": BOT_USERNAME}


def _ok(result: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "result": result})


def _true(_: dict[str, Any]) -> JSONResponse:
    return _ok(True)


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, status)


@contextlib.asynccontextmanager
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    async with serve(fake.app) as url:
        fake.base_url = url
        try:
            yield fake
        finally:
            await fake.close()


def telegram_settings(fake: FakeTelegram, **extra: Any) -> dict[str, Any]:
    return {
        "telegram_token": fake.token,
        "telegram_webhook_secret": WEBHOOK_SECRET,
        "telegram_api_url": fake.base_url,
    } | extra


# -- updates shaped like the Bot API documentation's examples ---------------------------

_update_ids = itertools.count(10_000)


def user(user_id: int, first_name: str = "Test", last_name: str = "User") -> dict[str, Any]:
    return {
        "id": user_id,
        "is_bot": False,
        "first_name": first_name,
        "last_name": last_name,
        "username": f"user{user_id}",
        "language_code": "en",
    }


def private_chat(user_id: int, first_name: str = "Test") -> dict[str, Any]:
    return {
        "id": user_id,
        "type": "private",
        "first_name": first_name,
        "username": f"user{user_id}",
    }


def group_chat(chat_id: int = -1001234567890, title: str = "Family") -> dict[str, Any]:
    return {"id": chat_id, "type": "supergroup", "title": title}


def text_update(
    user_id: int,
    text: str,
    *,
    message_id: int | None = None,
    chat: dict[str, Any] | None = None,
    first_name: str = "Test",
    date: int = 1_700_000_000,
    update_id: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    message_id = message_id if message_id is not None else next(_update_ids)
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": user(user_id, first_name),
        "chat": chat or private_chat(user_id, first_name),
        "date": date,
        "text": text,
    }
    if text.startswith("/"):
        command = text.split()[0]
        message["entities"] = [{"offset": 0, "length": len(command), "type": "bot_command"}]
    message.update(extra)
    return {
        "update_id": update_id if update_id is not None else next(_update_ids),
        "message": message,
    }


def mention_update(user_id: int, text: str, chat: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A group message that mentions the bot by @username somewhere in `text`."""
    handle = f"@{BOT_USERNAME}"
    update = text_update(user_id, text, chat=chat, **extra)
    offset = text.index(handle)
    update["message"]["entities"] = [{"offset": offset, "length": len(handle), "type": "mention"}]
    return update


def photo_update(user_id: int, caption: str | None = None, **extra: Any) -> dict[str, Any]:
    update = text_update(user_id, "", **extra)
    message = update["message"]
    del message["text"]
    message["photo"] = [
        {
            "file_id": "AgAD-small",
            "file_unique_id": "AQAD1",
            "width": 90,
            "height": 67,
            "file_size": 1254,
        },
        {
            "file_id": "AgAD-large",
            "file_unique_id": "AQAD2",
            "width": 1280,
            "height": 960,
            "file_size": 88123,
        },
    ]
    if caption is not None:
        message["caption"] = caption
    return update


def document_update(
    user_id: int, file_id: str, file_name: str, mime_type: str, **extra: Any
) -> dict[str, Any]:
    """A file sent as a document (`caption` may come in `extra`, as a message field)."""
    caption = extra.pop("caption", None)
    update = text_update(user_id, "", **extra)
    message = update["message"]
    del message["text"]
    message["document"] = {
        "file_id": file_id,
        "file_unique_id": f"u-{file_id}",
        "file_name": file_name,
        "mime_type": mime_type,
    }
    if caption is not None:
        message["caption"] = caption
    return update


def voice_update(user_id: int, **extra: Any) -> dict[str, Any]:
    update = text_update(user_id, "", **extra)
    message = update["message"]
    del message["text"]
    message["voice"] = {
        "file_id": "AwAD-voice",
        "file_unique_id": "AgAD3",
        "duration": 4,
        "mime_type": "audio/ogg",
        "file_size": 11212,
    }
    return update


def edited_update(user_id: int, message_id: int, text: str, edit_date: int) -> dict[str, Any]:
    original = text_update(user_id, text, message_id=message_id)
    message = original["message"] | {"edit_date": edit_date}
    return {"update_id": next(_update_ids), "edited_message": message}

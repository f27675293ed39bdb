"""The Bot API requests the Telegram connector sends (`AiohttpRequest`), against a
small Bot API server here: PTB's wire format, files as multipart, time-outs and
network failures as PTB's own errors, and never the token in an error."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from telegram import Bot
from telegram.error import NetworkError, TimedOut

from connectors.telegram.bot_request import AiohttpRequest
from tests.support.servers import serve

TOKEN = "123456:AAE-secret_token-value"
MESSAGE = {"message_id": 7, "date": 1764590400, "chat": {"id": 42, "type": "private"}}
ME = {"id": 123456, "is_bot": True, "first_name": "Parley", "username": "parley_bot"}


class BotAPI:
    """Records each call's content type and fields (files as name, bytes, type)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.hold: asyncio.Event | None = None
        self.app = Starlette(routes=[Route("/bot{token}/{method}", self.method, methods=["POST"])])

    async def method(self, request: Request) -> JSONResponse:
        fields: dict[str, Any] = {}
        async with request.form() as form:
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    fields[name] = (value.filename, await value.read(), value.content_type)
                else:
                    fields[name] = value
        method = request.path_params["method"]
        if method == "getMe":  # what `Bot.initialize` asks
            return JSONResponse({"ok": True, "result": ME})
        kind = request.headers.get("content-type", "").split(";")[0]
        self.calls.append((method, kind, fields))
        if self.hold is not None:
            await self.hold.wait()
        return JSONResponse({"ok": True, "result": MESSAGE | {"text": "hi"}})


def bot(base_url: str, request: AiohttpRequest | None = None) -> Bot:
    return Bot(TOKEN, base_url=f"{base_url}/bot", request=request or AiohttpRequest(base_url))


async def test_parameters_go_form_encoded_and_the_answer_is_read() -> None:
    api = BotAPI()
    async with serve(api.app) as url:
        sender = bot(url)
        async with sender:
            sent = await sender.send_message(42, "hello, world", disable_notification=True)
    assert sent.message_id == 7
    [(method, kind, fields)] = api.calls
    assert (method, kind) == ("sendMessage", "application/x-www-form-urlencoded")
    assert fields == {"chat_id": "42", "text": "hello, world", "disable_notification": "true"}


async def test_a_file_goes_multipart_with_its_name_and_type() -> None:
    api = BotAPI()
    async with serve(api.app) as url:
        sender = bot(url)
        async with sender:
            await sender.send_document(42, b"%PDF-1.4 tiny", filename="notes.pdf", caption="yours")
    [(method, kind, fields)] = api.calls
    assert (method, kind) == ("sendDocument", "multipart/form-data")
    assert (fields["chat_id"], fields["caption"]) == ("42", "yours")
    file_name, content, mime = next(v for v in fields.values() if isinstance(v, tuple))
    assert (file_name, content, mime) == ("notes.pdf", b"%PDF-1.4 tiny", "application/pdf")


async def test_a_silent_server_is_timed_out_without_the_token() -> None:
    api = BotAPI()
    api.hold = asyncio.Event()
    async with serve(api.app) as url:
        sender = bot(url, AiohttpRequest(url, read_timeout=0.2))
        try:
            async with sender:
                with pytest.raises(TimedOut) as caught:
                    await sender.send_message(42, "anyone there?")
        finally:
            api.hold.set()
    assert TOKEN not in str(caught.value)
    assert len(api.calls) == 1


async def test_a_refused_connection_is_a_network_error_without_the_token() -> None:
    # A bound socket that never listens refuses every connection.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{closed.getsockname()[1]}"
        request = AiohttpRequest(base)
        sender = bot(base, request)
        with pytest.raises(NetworkError) as caught:
            await sender.send_message(42, "hello")
        await request.shutdown()
    assert not isinstance(caught.value, TimedOut)
    assert "aiohttp.ClientConnectorError" in caught.value.message
    assert TOKEN not in caught.value.message


async def test_a_bad_url_is_an_error_that_never_shows_the_token() -> None:
    base = "http://[::1"  # an unclosed IPv6 host: the URL cannot be parsed
    request = AiohttpRequest(base)
    sender = bot(base, request)
    with pytest.raises(NetworkError) as caught:
        await sender.send_message(42, "hello")
    await request.shutdown()
    assert TOKEN not in caught.value.message
    assert TOKEN.split(":")[1] not in caught.value.message

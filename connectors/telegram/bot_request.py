"""python-telegram-bot's requests sent with aiohttp.

Its own `HTTPXRequest` costs about four times the CPU a call (h11 parses in Python,
with a cancel scope a read and a cookie jar on every answer); a Telegram turn makes two
or three calls (bench/README.md, stop 44). The wire format is PTB's own: the parameters
form-encoded, multipart when a file goes with them.
"""

from __future__ import annotations

import re

import aiohttp
from telegram._utils.types import ODVInput, UploadFileDict  # the types BaseRequest declares
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from gateway.sdk import client_session

# PTB's `HTTPXRequest` defaults, so nothing waits longer or shorter than it did.
READ_SECONDS = 5.0
WRITE_SECONDS = 5.0
CONNECT_SECONDS = 5.0
POOL_SECONDS = 1.0
MEDIA_WRITE_SECONDS = 20.0
# A Bot API URL holds the token (`/bot<token>/<method>`); no error message may.
_TOKEN = re.compile(r"bot\d+:[\w-]+")


class AiohttpRequest(BaseRequest):
    """A `BaseRequest` on one aiohttp session, opened by `initialize` or on first use
    (it needs the event loop) and closed by `shutdown`; after that, only `initialize`
    opens it again (as with PTB's own requests)."""

    def __init__(
        self, api_url: str, *, connections: int = 256, read_timeout: float = READ_SECONDS
    ) -> None:
        self._api_url = api_url
        self._connections = connections
        self._read_timeout = read_timeout
        self._session: aiohttp.ClientSession | None = None
        self._shut = False

    @property
    def read_timeout(self) -> float:
        return self._read_timeout

    async def initialize(self) -> None:
        self._shut = False
        self._open()

    async def shutdown(self) -> None:
        self._shut = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        files = request_data.multipart_data if request_data is not None else {}
        read = _given(read_timeout, self._read_timeout)
        connect = _given(connect_timeout, CONNECT_SECONDS)
        pool = _given(pool_timeout, POOL_SECONDS)
        write = _given(write_timeout, MEDIA_WRITE_SECONDS if files else WRITE_SECONDS)
        timeout = aiohttp.ClientTimeout(
            # aiohttp bounds no single write; an upload gets a deadline for the whole
            # call instead (writing, then waiting for the answer).
            total=None if not files or write is None or read is None else write + read,
            connect=None if pool is None or connect is None else pool + connect,
            sock_connect=connect,
            sock_read=read,
        )
        try:
            async with self._open().request(
                method,
                url,
                data=_body(request_data, files),
                headers={"User-Agent": self.USER_AGENT},
                timeout=timeout,
            ) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut(f"Timed out ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:
            # Not chained: the library's own exception may quote the URL.
            raise NetworkError(_scrubbed(f"aiohttp.{type(exc).__name__}: {exc}")) from None

    def _open(self) -> aiohttp.ClientSession:
        if self._shut:
            raise RuntimeError("this AiohttpRequest is shut down; initialize it again")
        if self._session is None or self._session.closed:
            # Timeouts are given per request, as PTB asks.
            self._session = client_session(
                self._api_url, aiohttp.ClientTimeout(), connections=self._connections
            )
        return self._session


def _given(value: ODVInput[float], default: float) -> float | None:
    # PTB's "not given" is a sentinel of its own type.
    return default if isinstance(value, type(BaseRequest.DEFAULT_NONE)) else value  # type: ignore[return-value]


def _body(
    request_data: RequestData | None, files: UploadFileDict
) -> dict[str, str] | aiohttp.FormData | None:
    if request_data is None:
        return None
    fields = request_data.json_parameters
    if not files:
        return fields or None  # form-encoded, as PTB sends them
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, (file_name, content, mime) in files.items():
        form.add_field(name, content, filename=file_name, content_type=mime)
    return form


def _scrubbed(message: str) -> str:
    return _TOKEN.sub("bot[token]", message)

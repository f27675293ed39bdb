"""Refuse request bodies over the configured size before the app sees any of it.

The body is read here (bodies are small: webhooks and chat messages; a file upload is
the one larger, under a limit of its own), so a chunked upload that never declares its
length is cut off at the limit too, and one that trickles in is cut off after
`PARLEY_READ_TIMEOUT_SECONDS` (408).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Where the web chat takes files: the one path whose body may be larger.
UPLOADS_PATH = "/webchat/uploads"
# The multipart form around an uploaded file: its boundaries and headers.
UPLOAD_FORM_BYTES = 64 * 1024


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        read_timeout: float,
        by_path: Mapping[str, tuple[int, float]] | None = None,
    ) -> None:
        """`by_path`: a size and a time limit of their own for some paths (file uploads:
        20 MB on a slow phone line takes longer than any other body)."""
        self._app = app
        self._max = max_bytes
        self._timeout = read_timeout
        self._by_path = dict(by_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        limit, timeout = self._by_path.get(scope["path"], (self._max, self._timeout))
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, 413, f"request body is larger than {limit} bytes")
            return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(timeout):
                complete = await self._read(receive, chunks, limit)
        except TimeoutError:
            await self._refuse(send, 408, f"request body took longer than {timeout:g} s")
            return
        if complete is None:
            return  # the client went away
        if not complete:
            await self._refuse(send, 413, f"request body is larger than {limit} bytes")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self._app(scope, replay, send)

    async def _read(self, receive: Receive, chunks: list[bytes], limit: int) -> bool | None:
        """Read the body into `chunks`: True when whole, False past the limit, None if
        the client went away."""
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return False
            chunks.append(chunk)
            if not message.get("more_body", False):
                return True

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

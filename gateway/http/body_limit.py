"""Refuse request bodies over the configured size before the app sees any of it.

The body is read here (bodies are small: webhooks and chat messages), so a chunked
upload that never declares its length is cut off at the limit too, and one that
trickles in is cut off after `PARLEY_READ_TIMEOUT_SECONDS` (408).
"""

from __future__ import annotations

import asyncio
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout: float) -> None:
        self._app = app
        self._max = max_bytes
        self._timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max:
            await self._refuse(send, 413, f"request body is larger than {self._max} bytes")
            return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self._timeout):
                complete = await self._read(receive, chunks)
        except TimeoutError:
            await self._refuse(send, 408, f"request body took longer than {self._timeout:g} s")
            return
        if complete is None:
            return  # the client went away
        if not complete:
            await self._refuse(send, 413, f"request body is larger than {self._max} bytes")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self._app(scope, replay, send)

    async def _read(self, receive: Receive, chunks: list[bytes]) -> bool | None:
        """Read the body into `chunks`: True when whole, False past the limit, None if
        the client went away."""
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
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

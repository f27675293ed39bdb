"""A TCP relay in front of a server whose client-to-server direction can be held: what
the client sends meanwhile waits in the relay, in order, until `release`. A test makes
a race happen on purpose with it (a command a client has sent that the server has yet
to see)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

CHUNK = 65536


class GatedLink:
    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._open = asyncio.Event()
        self._open.set()
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[GatedLink]:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            async with server:
                yield self
        finally:
            for pump in self._pumps:
                pump.cancel()
            await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        for pump in (
            self._pump(reader, up_writer, gated=True),
            self._pump(up_reader, writer, gated=False),
        ):
            task = asyncio.create_task(pump)
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, gated: bool
    ) -> None:
        try:
            while data := await source.read(CHUNK):
                if gated:
                    await self._open.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass  # the other side went away: the relay of this connection is over
        finally:
            sink.close()

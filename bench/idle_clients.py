"""One load-generator process of `bench.idle_sockets`: holds web chat WebSockets open.

    python -m bench.idle_clients WS_URL [--no-deflate]

It is driven over stdin/stdout, one JSON object a line:

- `{"cmd": "open", "tokens": [...], "concurrency": C, "per_second": R}`: open a socket
  per token (at most C handshakes at once; with R, the i-th starts no sooner than i/R
  seconds in), send the `auth` frame, wait for `ready`; answers
  `{"event": "opened", "ok": n, "failed": m, "errors": [...], "seconds": s}`.
- `{"cmd": "status"}`: answers `{"event": "status", "open": n, "closed": m, "rss_kb": k}`.
- `{"cmd": "close"}`: closes every socket, answers `{"event": "closed"}` and exits.

Every `message` frame whose text starts with PROBE_PREFIX is reported as
`{"event": "frame", "text": ..., "at": time.monotonic()}`, stamped when it is read off
the socket (CLOCK_MONOTONIC is one clock for every process on the machine, so the
driver can subtract its own send time). Sockets send no pings of their own (a browser
does not) but answer the server's, and offer permessage-deflate as browsers do (not with
`--no-deflate`: then no socket is compressed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

PROBE_PREFIX = "idle-bench-probe "
HANDSHAKE_TIMEOUT_SECONDS = 60.0


def rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Clients:
    def __init__(self, url: str, deflate: bool) -> None:
        self._url = url
        self._compression = "deflate" if deflate else None
        self._readers: set[asyncio.Task[None]] = set()
        self._sockets: list[ClientConnection] = []
        self.closed = 0

    def emit(self, payload: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(payload) + "\n")
        sys.stdout.flush()

    async def open(
        self, tokens: list[str], concurrency: int, per_second: float | None = None
    ) -> dict[str, Any]:
        gate = asyncio.Semaphore(concurrency)
        errors: list[str] = []
        started = time.monotonic()

        async def one(index: int, token: str) -> bool:
            if per_second is not None:
                await asyncio.sleep(started + index / per_second - time.monotonic())
            async with gate:
                try:
                    async with asyncio.timeout(HANDSHAKE_TIMEOUT_SECONDS):
                        ws = await connect(
                            self._url,
                            ping_interval=None,
                            open_timeout=None,
                            compression=self._compression,
                        )
                        await ws.send(json.dumps({"type": "auth", "token": token}))
                        first = json.loads(await ws.recv())
                except (OSError, TimeoutError, ConnectionClosed, ValueError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return False
            if first.get("type") != "ready":
                errors.append(f"first frame {first!r}")
                await ws.close()
                return False
            self._sockets.append(ws)
            reader = asyncio.create_task(self._read(ws))
            self._readers.add(reader)
            reader.add_done_callback(self._readers.discard)
            return True

        results = await asyncio.gather(*(one(i, t) for i, t in enumerate(tokens)))
        ok = sum(results)
        return {
            "event": "opened",
            "ok": ok,
            "failed": len(tokens) - ok,
            "errors": errors[:5],
            "seconds": round(time.monotonic() - started, 3),
        }

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                at = time.monotonic()
                frame = json.loads(raw)
                text = frame.get("text")
                if (
                    frame.get("type") == "message"
                    and isinstance(text, str)
                    and text.startswith(PROBE_PREFIX)
                ):
                    self.emit({"event": "frame", "text": text, "at": at})
        except ConnectionClosed:
            pass
        self.closed += 1

    def status(self) -> dict[str, Any]:
        alive = sum(1 for ws in self._sockets if ws.close_code is None)
        return {"event": "status", "open": alive, "closed": self.closed, "rss_kb": rss_kb()}

    async def close(self) -> None:
        async def one(ws: ClientConnection) -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 10)

        gate = asyncio.Semaphore(256)

        async def gated(ws: ClientConnection) -> None:
            async with gate:
                await one(ws)

        await asyncio.gather(*(gated(ws) for ws in self._sockets))
        for reader in list(self._readers):
            reader.cancel()


async def drive(url: str, deflate: bool) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    clients = Clients(url, deflate)
    while line := await reader.readline():
        command = json.loads(line)
        if command["cmd"] == "open":
            clients.emit(
                await clients.open(
                    command["tokens"], command["concurrency"], command.get("per_second")
                )
            )
        elif command["cmd"] == "status":
            clients.emit(clients.status())
        elif command["cmd"] == "close":
            await clients.close()
            clients.emit({"event": "closed"})
            return


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or args[1:] not in ([], ["--no-deflate"]):
        raise SystemExit("usage: python -m bench.idle_clients WS_URL [--no-deflate]")
    import uvloop  # the server's loop too (uvicorn[standard]); cheaper per socket

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(drive(args[0], deflate=args[1:] != ["--no-deflate"]))


if __name__ == "__main__":
    main()

"""`parley chat`: a terminal client of the web chat API, streaming replies as they come."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from gateway.errors import ParleyError
from memory.storage.files import private_dir, write_private

Write = Callable[[str], None]


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


async def _stdin_lines() -> AsyncIterator[str]:
    while True:
        _write_stdout("you> ")
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        yield line.rstrip("\n")


async def session_token(base: str, token_file: Path) -> str:
    """The local user's token: kept in `token_file`, created on first use."""
    saved = _read_token(token_file)
    if saved:
        return saved
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            response = await client.post("/webchat/sessions")
    except httpx.HTTPError as exc:
        raise ParleyError(
            f"cannot reach the gateway at {base}: is `parley serve` running?"
        ) from exc
    response.raise_for_status()
    token: str = response.json()["token"]
    _save_token(token_file, token)
    return token


def _read_token(path: Path) -> str | None:
    return path.read_text(encoding="utf-8").strip() if path.exists() else None


def _save_token(path: Path, token: str) -> None:
    # Created 0600, never readable by others even briefly. The directory is only made
    # private if we create it: `--token-file` may point into a home directory.
    private_dir(path.parent)
    write_private(path, token)


async def run_chat(
    base: str,
    token_file: Path,
    lines: AsyncIterator[str] | None = None,
    write: Write = _write_stdout,
) -> None:
    token = await session_token(base, token_file)
    ws_url = base.replace("http", "ws", 1) + "/webchat/ws"
    try:
        async with connect(ws_url) as socket:
            await socket.send(json.dumps({"type": "auth", "token": token}))
            write("Connected to Parley. Type a message; Ctrl-D to leave.\n")
            async for line in lines or _stdin_lines():
                if line.strip():
                    await exchange(socket, line, write)
    except OSError as exc:
        raise ParleyError(
            f"cannot reach the gateway at {base}: is `parley serve` running?"
        ) from exc


async def exchange(socket: ClientConnection, text: str, write: Write) -> None:
    """Send one message and print frames until the reply to it has arrived."""
    client_id = uuid.uuid4().hex
    await socket.send(json.dumps({"type": "message", "text": text, "client_id": client_id}))
    acked: int | None = None
    streamed = False
    while True:
        frame: dict[str, Any] = json.loads(await socket.recv())
        kind = frame.get("type")
        if kind == "ack" and frame.get("client_id") == client_id:
            acked = frame["seq"]
        elif kind == "typing" and streamed:
            # What streamed was not the answer: the model turned to its recall tools.
            write(" …\n")
            streamed = False
        elif kind == "delta":
            if not streamed:
                write("parley> ")
            streamed = True
            write(frame["text"])
        elif kind == "error":
            write(f"! {frame.get('detail', 'error')}\n")
            if frame.get("client_id") == client_id:
                return
        elif kind == "message" and frame["role"] != "user":
            if acked is not None and frame["seq"] > acked:
                write("\n" if streamed else f"parley> {frame['text']}\n")
                return
        elif kind == "message" and frame["channel"] != "webchat":
            write(f"[{frame['channel']}] {frame['text']}\n")

"""A web chat socket read from the test thread: frames until the one that matters,
failing with what came when it does not."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.fuzz.server import FuzzServer

FRAME_SECONDS = 10.0
Frame = dict[str, Any]


@contextlib.contextmanager
def open_socket(
    server: FuzzServer, token: str, *, in_url: bool = False
) -> Iterator[ClientConnection]:
    """A socket that has sent `token` in its `auth` frame (`in_url`: in `?token=`)."""
    url = server.ws_url(token if in_url else None)
    with connect(url, open_timeout=10, close_timeout=5) as ws:
        if not in_url:
            ws.send(json.dumps({"type": "auth", "token": token}))
        yield ws


def frames_until(
    server: FuzzServer, ws: ClientConnection, done: Callable[[Frame], bool], what: object
) -> list[Frame]:
    """Frames received until one satisfies `done` (included); fails on a timeout or a
    closed socket (with what the server logged), listing what came."""
    frames: list[Frame] = []
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


def message_at(seq: int) -> Callable[[Frame], bool]:
    """Is this frame the conversation's message `seq`?"""
    return lambda frame: frame.get("type") == "message" and frame.get("seq") == seq


def typed(*types: str) -> Callable[[Frame], bool]:
    """Is this frame of one of `types`?"""
    return lambda frame: frame.get("type") in types


def close_code(ws: ClientConnection) -> int | None:
    """The code the server closes the socket with (None: no close frame came), once it
    does; fails if a frame or nothing comes instead."""
    try:
        frame = ws.recv(timeout=FRAME_SECONDS)
    except ConnectionClosed as closed:
        return None if closed.rcvd is None else closed.rcvd.code
    raise AssertionError(f"a frame instead of the socket closing: {frame!r}")

"""The fakes the children talk to, served on the loopback: the model and the Telegram
Bot API.

Each child reaches the model at a base URL of its own (`model_url`), so the model knows
which process made a call: an aimed kill needs to know whom to kill, and the model can
hold a call open so the kill lands while it is in flight. Every reply text is unique, so
a reply sent twice is recognisable. A child killed while sending a request is no error
in either fake, and leaves no traceback on the output."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.fakes.telegram_api import FakeTelegram
from tests.support.archive_checks import request_kind
from tests.support.servers import serve

# The child whose model call is being answered (its tag in the URL `/p/{tag}/v1`).
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="?")


class CallerTags:
    """`/p/{tag}/...` reaches the wrapped app as `/...`, with `CALLER` set to `tag`."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/p/"):
            await self._app(scope, receive, send)
            return
        _, _, tag, rest = path.split("/", 3)
        inner = dict(scope, path=f"/{rest}", raw_path=f"/{rest}".encode())
        token = CALLER.set(tag)
        try:
            await self._app(inner, receive, send)
        finally:
            CALLER.reset(token)


class KilledClients:
    """The wrapped app takes a client that vanishes mid-request as the kill it is."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with contextlib.suppress(ClientDisconnect):
            await self._app(scope, receive, send)


@dataclass(eq=False)
class Trap:
    """Holds the next model call of one of `kinds` open until the trap ends."""

    kinds: frozenset[str]
    callers: frozenset[str] | None = None  # whose calls it may hold (None: anyone's)
    sprung: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    caller: str | None = None  # the child whose call it holds


class ModelScript:
    """The model's answers: a unique text per call, short summaries, and no facts found
    (valid JSON in every answer format)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # by "caller kind"
        self._traps: list[Trap] = []

    def respond(self, body: dict[str, Any], number: int) -> Behaviour:
        kind = request_kind(body)
        caller = CALLER.get()
        self.calls[f"{caller} {kind}"] += 1
        trap = next(
            (
                t
                for t in self._traps
                if kind in t.kinds and t.caller is None and caller in (t.callers or {caller})
            ),
            None,
        )
        if trap is None:
            return Reply(_answer(kind, number))
        trap.caller = caller
        trap.sprung.set()
        return Reply(_answer(kind, number), gate=trap.gate)

    @contextlib.asynccontextmanager
    async def trap(
        self, kinds: Iterable[str], callers: Iterable[str] | None = None
    ) -> AsyncIterator[Trap]:
        """Arm a trap (for calls of `callers` only, if given); on leaving, the held call
        (if any) is answered."""
        trap = Trap(frozenset(kinds), None if callers is None else frozenset(callers))
        self._traps.append(trap)
        try:
            yield trap
        finally:
            self._traps.remove(trap)
            trap.gate.set()


def _answer(kind: str, number: int) -> str:
    if kind == "summary":
        return f"summary {number}: they talked about the weather and the garden."
    if kind == "extract":
        return json.dumps({"facts": []})
    return f"reply {number}"


@contextlib.asynccontextmanager
async def fake_model(script: ModelScript) -> AsyncIterator[FakeLLM]:
    """The fake model, answering every call by `script`.

    Unlike `fake_llm()`, nothing is released on the way out: the only calls held are
    those of `ModelScript.trap`, which answers them when it ends."""
    llm = FakeLLM()
    llm.responder = script.respond
    async with serve(KilledClients(CallerTags(llm.app))) as url:
        llm.base_url = url
        yield llm


def model_url(llm: FakeLLM, caller: str) -> str:
    """The model's base URL for the child named `caller`."""
    return f"{llm.base_url}/p/{caller}/v1"


@contextlib.asynccontextmanager
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """As `tests.fakes.telegram_api.fake_telegram()`, quiet about killed clients."""
    telegram = FakeTelegram()
    async with serve(KilledClients(telegram.app)) as url:
        telegram.base_url = url
        try:
            yield telegram
        finally:
            await telegram.close()

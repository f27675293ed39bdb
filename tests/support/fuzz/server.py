"""A real gateway (web chat, Telegram and WhatsApp against the fake platforms, the fake
model) on 127.0.0.1, run by its own event loop in a background thread.

Hypothesis tests stay synchronous: examples call into the server's loop with
`FuzzServer.call`, and use the harness's async helpers there. In-process rather than
`parley serve` as a child because the error log then arrives as exception objects with
whole tracebacks (no stderr to drain and parse), the database is one `select` away, the
fakes and helpers are the ones every other test uses, and a gateway starts in a
fraction of a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from hypothesis import note
from sqlalchemy import func, select

from memory.storage.messages import MESSAGE_COLUMNS, StoredMessage, message_view
from memory.storage.models import Delivery, Message, Role
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, fake_llm
from tests.support.fuzz.error_log import ErrorLog, capture_errors, crash, format_exception
from tests.support.fuzz.gateway_lines import forged_lines_shown, prompt_text
from tests.support.fuzz.limits import ANSWER_SECONDS, gateway_settings
from tests.support.fuzz.strategies import url_quoted
from tests.support.harness import Gateway
from tests.support.platforms import Platforms, platform_gateway
from tests.support.polling import eventually

T = TypeVar("T")

START_SECONDS = 30.0
CALL_SECONDS = 60.0
LOG_SECONDS = 2.0


@dataclass(frozen=True)
class Visitor:
    token: str
    conversation_id: uuid.UUID


class FuzzServer:
    def __init__(self, database_url: str, data_dir: Path) -> None:
        self._database_url = database_url
        self._data_dir = data_dir
        self.errors = ErrorLog()
        self._ready: concurrent.futures.Future[Platforms] = concurrent.futures.Future()
        self._llm: FakeLLM | None = None
        self._prompts_seen = 0  # model requests made before the example began
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fuzz-gateway", daemon=True)

    # -- lifecycle --

    def start(self) -> None:
        self._thread.start()
        self._ready.result(timeout=START_SECONDS)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=START_SECONDS)
        assert not self._thread.is_alive(), "the gateway did not stop"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the test thread
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                self.errors.add(f"[fuzz server] the gateway's loop crashed{format_exception(exc)}")

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        self._loop, self._stop = loop, asyncio.Event()
        # The fakes stop together once the gateway has (each takes a few of uvicorn's
        # 0.1 s ticks; one after the other they would add up over a whole suite).
        entered: list[contextlib.AbstractAsyncContextManager[Any]] = []

        async def enter(fake: contextlib.AbstractAsyncContextManager[T]) -> T:
            value = await fake.__aenter__()
            entered.append(fake)
            return value

        try:
            llm = self._llm = await enter(fake_llm())
            telegram, whatsapp = await enter(tg.fake_telegram()), await enter(wa.fake_graph())
            gateway = platform_gateway(
                self._database_url,
                self._data_dir,
                llm,
                tg=telegram,
                wa=whatsapp,
                **gateway_settings(),
            )
            async with gateway as platforms:
                self._ready.set_result(platforms)
                await self._stop.wait()
        finally:
            outcomes = await asyncio.gather(
                *(fake.__aexit__(None, None, None) for fake in entered), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome

    def _loop_error(self, _: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.errors.add(
            f"[asyncio] {context.get('message')}"
            f"{format_exception(exc if isinstance(exc, BaseException) else None)}"
        )

    # -- using it from the test thread --

    @property
    def platforms(self) -> Platforms:
        assert self._ready.done(), "server not started"
        return self._ready.result()

    @property
    def gw(self) -> Gateway:
        return self.platforms.gw

    @property
    def url(self) -> str:
        return self.gw.url

    def ws_url(self, token: str | None) -> str:
        """The socket's URL, with `token` in it (None: the token goes in the first frame)."""
        url = self.url.replace("http", "ws", 1) + "/webchat/ws"
        return url if token is None else url + "?token=" + url_quoted(token)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_SECONDS) -> T:
        """Run `coro` on the server's loop and wait for its result."""
        assert self._loop is not None, "server not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> httpx.Response:
        return self.call(self.gw.http.request(method, url, content=content, headers=headers))

    def webhook(self, platform: str, body: bytes | dict[str, Any]) -> httpx.Response:
        """`body` posted as `platform` posts it: with its secret, or signed."""
        send = self.platforms.telegram if platform == "telegram" else self.platforms.whatsapp
        return self.call(send(body))

    def visitor(self, *, seeded: bool = False) -> Visitor:
        """A new web chat visitor; `seeded`: with one answered message (seqs 1 and 2)."""
        token, conversation_id = self.call(self.gw.visitor())
        if seeded:
            response = self.call(self.gw.send(token, "seed"))
            assert response.status_code == 200, response.text
        return Visitor(token, uuid.UUID(conversation_id))

    def user_texts(self, visitor: Visitor) -> list[str]:
        """The texts of the visitor's own messages, as their history shows them."""
        history = self.call(self.gw.history(visitor.token))
        return [message["text"] for message in history if message["role"] == "user"]

    # -- the database --

    def last_message_id(self) -> int:
        async def query() -> int:
            async with self.gw.services.engine.connect() as connection:
                value = (await connection.execute(select(func.max(Message.id)))).scalar()
            return int(value or 0)

        return self.call(query())

    def incoming_since(self, mark: int) -> list[StoredMessage]:
        """Messages stored after `mark` that answer nothing: what came in, not the
        assistant's replies or the gateway's answers to commands."""
        query = (
            select(*MESSAGE_COLUMNS)
            .where(
                Message.id > mark, Message.reply_to_seq.is_(None), Message.role != Role.ASSISTANT
            )
            .order_by(Message.id)
        )

        async def rows() -> list[StoredMessage]:
            async with self.gw.services.engine.connect() as connection:
                return [message_view(row) for row in await connection.execute(query)]

        return self.call(rows())

    def wait_until_answered(self, message: StoredMessage) -> StoredMessage:
        """The answer to `message` (the model's reply, or the gateway's answer to a
        command), once stored and delivered or failed; or a failure naming what the
        server logged meanwhile."""
        mark = self.errors.mark()
        messages = self.gw.services.repos.messages

        def settled(found: StoredMessage | None) -> bool:
            if self.errors.since(mark):
                return True
            return found is not None and found.delivery is not Delivery.PENDING

        try:
            answer = self.call(
                eventually(
                    lambda: messages.reply_for(message.conversation_id, message.seq),
                    until=settled,
                    seconds=ANSWER_SECONDS,
                )
            )
        except TimeoutError:
            answer = None
        problem = (
            f"message {message.seq} ({message.text[:80]!r}) was not answered and delivered "
            f"(waited up to {ANSWER_SECONDS}s or until an error)"
        )
        if self.errors.since(mark):
            raise crash(problem, self.errors.since(mark))
        assert answer is not None, problem
        assert answer.delivery is not Delivery.PENDING, problem
        return answer

    # -- checks --

    def begin(self, example: object = None) -> None:
        """An example starts: what it causes is checked by `assert_no_errors`. Its input
        goes into Hypothesis's report (which prints arguments blank here)."""
        if example is not None:
            shown = repr(example)
            note(f"input: {shown if len(shown) < 3000 else shown[:3000] + ' ...'}")
        self.errors.begin()
        self._prompts_seen = len(self._prompts())

    def failure(self, problem: str) -> AssertionError:
        """A failure for a 5xx or a dropped socket, carrying what the server logged for
        it (uvicorn logs an exception just after it answered 500, so this waits a moment
        for it, and takes it so no later example is blamed)."""

        async def logged() -> list[str]:
            return self.errors.since()

        with contextlib.suppress(TimeoutError):
            self.call(eventually(logged, until=bool, seconds=LOG_SECONDS))
        return crash(problem, self.errors.unchecked())

    def assert_not_5xx(self, response: httpx.Response, what: object) -> None:
        if response.status_code >= 500:
            raise self.failure(f"{response.status_code} for {what!r}: {response.text[:300]!r}")

    def _prompts(self) -> list[str]:
        """Every model request so far, as text."""
        assert self._llm is not None, "server not started"
        llm = self._llm

        async def requests() -> list[str]:
            return [prompt_text(request) for request in llm.requests]

        return self.call(requests())

    def assert_shown_escaped(self, typed: list[str], what: object) -> None:
        """No model request since the example began holds a line of `typed` that passes
        for one the gateway writes, as it is: each reached the model escaped."""
        for prompt in self._prompts()[self._prompts_seen :]:
            forged = forged_lines_shown(typed, prompt)
            assert not forged, f"{what!r}: the model read {forged!r} as the gateway's"

    def assert_no_errors(self, what: object) -> None:
        new = self.errors.unchecked()
        if new:
            raise crash(f"the server logged errors for {what!r}", new)

    def assert_healthy(self) -> None:
        """Probes answer, and a normal message on every channel is stored and answered,
        with nothing in the error log meanwhile."""
        self.begin()
        assert self.request("GET", "/healthz").status_code == 200
        assert self.request("GET", "/readyz").status_code == 200
        token = self.visitor().token
        response = self.call(self.gw.send(token, "still there?"))
        assert response.status_code == 200, response.text
        assert response.json()["reply"] is not None
        # Senders no fuzzed case uses (their ids have other lengths).
        for platform, payload in [
            ("telegram", tg.text_update(42, "hello again")),
            ("whatsapp", wa.message_notification("15550000042", text="hello again")),
        ]:
            before = self.last_message_id()
            assert self.webhook(platform, payload).status_code == 200
            [stored] = self.incoming_since(before)
            self.wait_until_answered(stored)
        self.assert_no_errors("normal messages after fuzzing")


@contextlib.contextmanager
def fuzz_server(database_url: str, data_dir: Path) -> Iterator[FuzzServer]:
    """A started gateway, its errors captured; once the body is done, it must still be
    healthy, and must stop without logging an error."""
    server = FuzzServer(database_url, data_dir)
    server.start()
    with capture_errors(server.errors):
        try:
            yield server
            server.assert_healthy()
        finally:
            server.begin()
            server.stop()
            server.assert_no_errors("shutting down")

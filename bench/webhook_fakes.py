"""The platforms and the model for `bench.webhook_ack`, in a process of their own:
`python -m bench.webhook_fakes --port-file FILE`.

It serves the test suite's fakes on real localhost sockets: the fake Telegram Bot API,
the fake WhatsApp Graph API and the fake OpenAI-compatible model server, plus a small
state endpoint the benchmark polls. Each runs on its own port in this process' event
loop, so their CPU is not the load generator's.

The model answers at once (no delay; three streamed pieces, or `--pieces N`, a word a
piece as a real model streams its tokens). Its reply names the highest message number it
was shown, `answered up to msg-N`, so the replies the
platforms receive say which of a chat's updates each turn answered: a turn answers
everything that arrived before it began (updates that come during a turn are answered
together by the next), so per chat these numbers must rise, and the last must be the
chat's last update.

The port file gets, once every server accepts connections, a JSON object of base URLs:
`llm` (OpenAI base, ending in /v1), `telegram`, `graph` (ending in the API version) and
`state` (also serving `/replied/{chat}/{count}`, a long poll for a Telegram chat's
`count`-th reply). The process serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.graph_api import FakeGraph
from tests.fakes.llm_server import Behaviour, FakeLLM, Reply
from tests.fakes.telegram_api import FakeTelegram
from tests.support.servers import serve

MARK = re.compile(r"msg-(\d+)-of-")
ANSWER = re.compile(r"answered up to msg-(\d+)")
REPLY_WAIT_SECONDS = 60.0


def message_text(number: int, chat: str) -> str:
    """What update `number` (from 1) of `chat` says: the model reads the number back."""
    return f"hello, this is msg-{number}-of-{chat}; please note it down"


def responder(pieces: int) -> Callable[[dict[str, Any], int], Behaviour]:
    """Replies that name the highest message number in the prompt, in `pieces` pieces."""
    padding = "".join(f" word{i}" for i in range(pieces - 3)) if pieces > 3 else ""

    def respond(body: dict[str, Any], _: int) -> Behaviour:
        seen = [int(n) for n in MARK.findall(json.dumps(body.get("messages", [])))]
        return Reply(f"ok, answered up to msg-{max(seen, default=0)}.{padding}", pieces=pieces)

    return respond


def answered(text: str) -> int | None:
    found = ANSWER.search(text)
    return int(found.group(1)) if found else None


class State:
    def __init__(self, llm: FakeLLM, tg: FakeTelegram, wa: FakeGraph) -> None:
        self.llm, self.tg, self.wa = llm, tg, wa
        self.app = Starlette(
            routes=[
                Route("/state", self.state, methods=["GET"]),
                Route("/replied/{chat:int}/{count:int}", self.replied, methods=["GET"]),
            ]
        )

    async def replied(self, request: Request) -> JSONResponse:
        """Answers once the Telegram chat has been sent `count` messages (a long poll:
        `bench.turn_cost` waits here for each turn's reply); 504 after a minute."""
        chat, count = request.path_params["chat"], request.path_params["count"]
        if await self.tg.wait_sent(chat, count, REPLY_WAIT_SECONDS):
            return JSONResponse({"chat": chat, "count": count})
        return JSONResponse({"error": f"chat {chat} has no reply {count}"}, status_code=504)

    async def state(self, _: Request) -> JSONResponse:
        """Per chat, what each reply answered, in the order the platform took them."""
        replies: dict[str, dict[str, list[int | None]]] = {
            "telegram": defaultdict(list),
            "whatsapp": defaultdict(list),
        }
        for call in self.tg.sent():
            replies["telegram"][str(call.params["chat_id"])].append(
                answered(str(call.params["text"]))
            )
        for sent in self.wa.texts_sent:
            replies["whatsapp"][str(sent["to"])].append(answered(sent["text"]["body"]))
        return JSONResponse(
            {
                "model_requests": len(self.llm.requests),
                "telegram_calls": len(self.tg.calls),
                "telegram_methods": Counter(call.method for call in self.tg.calls),
                "whatsapp_reads": len(self.wa.reads),
                "replies": replies,
            }
        )


async def run(port_file: Path, pieces: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    llm, tg, wa = FakeLLM(), FakeTelegram(), FakeGraph()
    llm.responder = responder(pieces)
    state = State(llm, tg, wa)
    async with contextlib.AsyncExitStack() as stack:
        llm.base_url = await stack.enter_async_context(serve(llm.app))
        tg.base_url = await stack.enter_async_context(serve(tg.app))
        wa.base_url = await stack.enter_async_context(serve(wa.app))
        state_url = await stack.enter_async_context(serve(state.app))
        urls = {
            "llm": llm.openai_base,
            "telegram": tg.base_url,
            "graph": wa.api_url,
            "state": state_url,
        }
        staged = port_file.with_suffix(".tmp")
        staged.write_text(json.dumps(urls), encoding="utf-8")
        os.replace(staged, port_file)  # never read half-written
        await stop.wait()
        await tg.close()
        llm._release()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_fakes")
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--pieces", type=int, default=3, help="streamed pieces a reply")
    args = parser.parse_args(argv)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run(args.port_file, max(1, args.pieces)))


if __name__ == "__main__":
    main()

"""The floor `bench.webhook_ack` compares the gateway's acknowledgements with:
`python -m bench.webhook_baseline --database-url URL --port-file FILE`.

A bare FastAPI app under uvicorn in its own process, taking the same POSTs as the
gateway: `/webhooks/telegram` checks the `X-Telegram-Bot-Api-Secret-Token` header in
constant time, `/webhooks/whatsapp` the `X-Hub-Signature-256` HMAC of the raw body. It
parses the JSON body, stores the update's text as one row in `messages` (one INSERT
through the gateway's engine factory, one COMMIT) and answers 200. No turn, no logging.
The secrets are the fakes' (`tests.fakes`), as the gateway's are in the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response

from bench.turn_server import serve
from memory.storage.engine import create_engine, session_factory
from memory.storage.models import Conversation, ConversationKind, Message, Role, utcnow
from tests.fakes.graph_api import APP_SECRET
from tests.fakes.telegram_api import WEBHOOK_SECRET

TELEGRAM_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WHATSAPP_HEADER = "X-Hub-Signature-256"


def telegram_text(update: dict[str, Any]) -> str:
    return str(update["message"]["text"])


def whatsapp_text(notification: dict[str, Any]) -> str:
    value = notification["entry"][0]["changes"][0]["value"]
    return str(value["messages"][0]["text"]["body"])


def baseline_app(database_url: str) -> FastAPI:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    conversation_id = uuid.uuid4()
    seqs = itertools.count(1)  # one process, one loop: a plain counter gives unique seqs
    app_secret = APP_SECRET.encode()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The benchmark migrates the schema before any server starts.
        async with sessions() as session:
            session.add(
                Conversation(
                    id=conversation_id,
                    kind=ConversationKind.GROUP,
                    channel="bench",
                    group_id=conversation_id.hex,
                    title="webhook baseline",
                )
            )
            await session.commit()
        try:
            yield
        finally:
            await engine.dispose()

    async def store(channel: str, text: str) -> None:
        async with sessions() as session:
            session.add(
                Message(
                    conversation_id=conversation_id,
                    seq=next(seqs),
                    role=Role.USER,
                    channel=channel,
                    author_name="Bench",
                    text=text,
                    created_at=utcnow(),
                    token_count=0,
                    delivery_attempts=0,
                )
            )
            await session.commit()

    app = FastAPI(title="Parley webhook baseline", lifespan=lifespan)

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    @app.post("/webhooks/telegram")
    async def telegram(request: Request) -> Response:
        given = request.headers.get(TELEGRAM_HEADER, "")
        if not hmac.compare_digest(given.encode(), WEBHOOK_SECRET.encode()):
            raise HTTPException(403, f"wrong {TELEGRAM_HEADER}")
        body = await request.body()
        try:
            text = telegram_text(json.loads(body))
        except (ValueError, KeyError, TypeError):
            raise HTTPException(400, "not a Telegram update") from None
        await store("bench-telegram", text)
        return Response(status_code=200)

    @app.post("/webhooks/whatsapp")
    async def whatsapp(request: Request) -> Response:
        body = await request.body()
        digest = hmac.new(app_secret, body, hashlib.sha256).hexdigest()
        given = request.headers.get(WHATSAPP_HEADER, "")
        if not hmac.compare_digest(given.encode(), f"sha256={digest}".encode()):
            raise HTTPException(401, f"wrong {WHATSAPP_HEADER}")
        try:
            text = whatsapp_text(json.loads(body))
        except (ValueError, KeyError, TypeError, IndexError):
            raise HTTPException(400, "not a WhatsApp notification") from None
        await store("bench-whatsapp", text)
        return Response(status_code=200)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_baseline")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)
    # The server settings `parley serve` gets: uvloop and httptools, no access log.
    config = uvicorn.Config(
        baseline_app(args.database_url),
        host="127.0.0.1",
        port=0,
        lifespan="on",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve(server, args.port_file))


if __name__ == "__main__":
    main()

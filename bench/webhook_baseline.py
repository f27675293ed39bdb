"""The floor `bench.webhook_ack` compares the gateway's acknowledgements with:
`python -m bench.webhook_baseline --database-url URL --port-file FILE`.

A bare FastAPI app under uvicorn in its own process, taking the same POSTs as the
gateway: `/webhooks/telegram` checks the `X-Telegram-Bot-Api-Secret-Token` header in
constant time, `/webhooks/whatsapp` the `X-Hub-Signature-256` HMAC of the raw body. It
parses the JSON body, stores the update's text as one row in `messages` (one INSERT
through the gateway's engine factory, one COMMIT) and answers 200. No turn, no logging.
`/bench/messages` takes a web chat message's body the same way (`bench.turn_cost`).
The secrets are the fakes' (`tests.fakes`), as the gateway's are in the benchmark.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response

from bench.turn_apps import BASELINE_PATH, BaselineIn, BaselineOut, BaselineStore
from bench.turn_server import run_on_a_free_port
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
    rows = BaselineStore(database_url, "webhook baseline")
    app_secret = APP_SECRET.encode()
    store = rows.store
    app = FastAPI(title="Parley webhook baseline", lifespan=rows.lifespan)

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

    @app.post(BASELINE_PATH)
    async def webchat(body: BaselineIn) -> BaselineOut:
        message = await store("bench", body.text, body.client_id)
        return BaselineOut(id=message.id, seq=message.seq)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_baseline")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)
    run_on_a_free_port(baseline_app(args.database_url), args.port_file)


if __name__ == "__main__":
    main()

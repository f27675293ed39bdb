"""The baseline of `bench.idle_sockets`: a bare FastAPI WebSocket app, served the way
`parley serve` serves the gateway (`gateway.http.server.server_config`: the same
uvicorn WebSocket implementation, frame limit and ping interval; uvloop, httptools).

    python -m bench.idle_echo --port PORT

- `GET /healthz` → 200.
- WebSocket `/webchat/ws`: accepts, reads the first frame (`{"type": "auth", "token"}`),
  answers `{"type": "ready"}`, then echoes every text frame; the socket is kept under its
  token so that:
- `POST /bench/push` `{"token", "text"}` sends `{"type": "message", "text"}` to it (204),
  like the gateway pushing an operator's message.

No database, no hub, no per-socket task of its own: the floor for an idle socket.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from fastapi import FastAPI, Response, WebSocket, WebSocketDisconnect

from gateway.http.server import server_config
from gateway.settings import Settings


def echo_app() -> FastAPI:
    app = FastAPI()
    sockets: dict[str, WebSocket] = {}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/bench/push", status_code=204)
    async def push(body: dict[str, Any]) -> Response:
        await sockets[body["token"]].send_json({"type": "message", "text": body["text"]})
        return Response(status_code=204)

    @app.websocket("/webchat/ws")
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        token = ""
        try:
            auth = await websocket.receive_json()
            token = str(auth.get("token", ""))
            sockets[token] = websocket
            await websocket.send_json({"type": "ready", "seen_seq": 0})
            while True:
                await websocket.send_text(await websocket.receive_text())
        except WebSocketDisconnect:
            pass
        finally:
            sockets.pop(token, None)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_echo")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    settings = Settings(_env_file=None)
    config = server_config(echo_app(), settings, host="127.0.0.1", port=args.port)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()

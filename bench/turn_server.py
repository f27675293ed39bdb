"""Serve one benchmark app in its own process: `python -m bench.turn_server KIND ...`.

The process lets the OS pick a free port, writes it to `--port-file` once uvicorn
accepts connections, and serves until SIGTERM or SIGINT (then shuts down cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Literal

import uvicorn
from fastapi import FastAPI

from bench.turn_apps import baseline_app, gateway_app
from gateway.logs import configure_logging

Kind = Literal["baseline", "gateway"]
KINDS: tuple[Kind, ...] = ("baseline", "gateway")


def build(kind: Kind, database_url: str, data_dir: Path) -> FastAPI:
    if kind == "baseline":
        return baseline_app(database_url)
    return gateway_app(database_url, data_dir)


async def serve(server: uvicorn.Server, port_file: Path) -> None:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise SystemExit("the server stopped before it started")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    staged = port_file.with_suffix(".tmp")
    staged.write_text(str(port), encoding="utf-8")
    os.replace(staged, port_file)  # the benchmark never reads a half-written file
    await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_server")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    kind: Kind = args.kind
    # The same server settings for both apps.
    run_on_a_free_port(build(kind, args.database_url, args.data_dir), args.port_file)


def run_on_a_free_port(app: FastAPI, port_file: Path) -> None:
    """Serve `app` with the server settings `parley serve` gets from `uvicorn.run`
    (uvloop and httptools when installed, no access log) until told to stop."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve(server, port_file))


if __name__ == "__main__":
    main()

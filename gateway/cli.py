"""The `parley` command."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gateway.errors import ParleyError
from gateway.settings import Settings, load_settings

app = typer.Typer(help="Parley: one never-ending conversation per person, on every channel.")


def _fail(message: str) -> NoReturn:
    typer.echo(f"parley: {message}", err=True)
    raise typer.Exit(2)


def _settings() -> Settings:
    try:
        return load_settings()
    except ParleyError as exc:
        _fail(str(exc))


@app.command()
def serve() -> None:
    """Run the gateway: HTTP API, web chat and every configured connector."""
    import uvicorn

    from gateway.app import create_app
    from gateway.http.server import server_config
    from gateway.logs import configure_logging

    settings = _settings()
    configure_logging(settings.log_level.value)
    try:
        application = create_app(settings)
    except ParleyError as exc:
        _fail(str(exc))
    typer.echo(f"Parley is listening on http://{settings.host}:{settings.port}", err=True)
    server = uvicorn.Server(
        server_config(application, settings, host=settings.host, port=settings.port)
    )
    with contextlib.suppress(SystemExit):  # uvicorn's exit when the lifespan refused
        server.run()
    if not server.started:  # the lifespan logged why
        raise typer.Exit(2)


@app.command()
def worker() -> None:
    """Run archive jobs from Redis (PARLEY_REDIS_URL): an arq worker."""
    from gateway.jobs.arq_worker import run_worker
    from gateway.logs import configure_logging

    settings = _settings()
    if not settings.redis_url:
        _fail("invalid setting PARLEY_REDIS_URL: `parley worker` needs Redis")
    configure_logging(settings.log_level.value)
    run_worker(settings)


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    from memory.storage.engine import create_engine
    from memory.storage.schema import head_revision
    from memory.storage.schema import migrate as run_migrations

    settings = _settings()

    async def run() -> None:
        engine = create_engine(settings.resolved_database_url)
        try:
            await run_migrations(engine)
        finally:
            await engine.dispose()

    asyncio.run(run())
    typer.echo(f"database is at revision {head_revision()}")


@app.command()
def chat(
    url: Annotated[
        str | None, typer.Option(help="Gateway base URL (default: PARLEY_HOST:PARLEY_PORT).")
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="Where the local user's web chat token is kept."),
    ] = None,
) -> None:
    """Talk to the assistant from this terminal, through a running gateway."""
    from gateway.terminal import run_chat

    settings = _settings()
    base = (url or f"http://{settings.host}:{settings.port}").rstrip("/")
    try:
        asyncio.run(run_chat(base, token_file or settings.data_dir / "chat-token"))
    except ParleyError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(0)


# -- pairing: people waiting to talk to the bot on a `pairing` channel ------------------

pairing = typer.Typer(help="People waiting to talk to the bot on a `pairing` channel.")
app.add_typer(pairing, name="pairing")


@pairing.command("list")
def pairing_list() -> None:
    """Show the pairing codes waiting for approval."""
    from gateway.channels.pairing import pending_lines
    from memory.storage.schema import SchemaOutOfDate

    settings = _settings()
    try:
        lines = asyncio.run(pending_lines(settings))
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))
    typer.echo("\n".join(lines) if lines else "no pairing requests are waiting")


@pairing.command("approve")
def pairing_approve(code: Annotated[str, typer.Argument(help="The code the person got.")]) -> None:
    """Let the person with this pairing code talk to the assistant."""
    from gateway.channels.pairing import approve
    from memory.storage.schema import SchemaOutOfDate

    settings = _settings()
    try:
        typer.echo(asyncio.run(approve(settings, code)))
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))


def main() -> None:
    app()

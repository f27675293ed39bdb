"""The `parley` command."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, NoReturn

import typer

from gateway.errors import ParleyError
from gateway.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from gateway.channels.port import Webhooks
    from memory.portable.imports import ImportCounts

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
    from gateway.logs import configure_logging, secrets_of
    from gateway.secrets import with_admin_token

    settings = _settings()
    # Without PARLEY_ADMIN_TOKEN, the data dir's (made on the first run); on a terminal,
    # a link that signs a browser in to the dashboard without copying it.
    show_link = settings.admin_token is None and sys.stdout.isatty()
    try:
        settings = with_admin_token(settings)
    except OSError as exc:
        _fail(f"cannot keep the admin token in PARLEY_DATA_DIR: {exc}")
    configure_logging(
        settings.log_level.value,
        secrets=secrets_of(settings),
        log_format=settings.log_format.value,
    )
    try:
        application = create_app(
            settings,
            sign_in_link=_show_sign_in_link if show_link else None,
            started=_keep_for_good,
        )
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


def _keep_for_good() -> None:
    """What a started gateway holds (modules, mappers, its services: 200,000 objects)
    lives as long as the process: out of the collector's reach, a full collection under
    load takes 2 ms instead of holding the event loop for 140."""
    gc.collect()
    gc.freeze()


def _show_sign_in_link(url: str) -> None:
    typer.echo(f"Sign in to the dashboard (this link works once, for 15 minutes):\n  {url}")


@app.command("admin-link")
def admin_link() -> None:
    """Print a one-time link that signs a browser in to the dashboard (for 15 minutes)."""
    from gateway.secrets import with_admin_token
    from memory.storage.migrate import SchemaOutOfDate

    try:
        settings = with_admin_token(_settings())
        typer.echo(asyncio.run(_admin_link(settings)))
    except (ParleyError, SchemaOutOfDate, OSError) as exc:
        _fail(str(exc))


async def _admin_link(settings: Settings) -> str:
    from gateway.clock import SystemClock
    from gateway.http.operators import OperatorAuth, sign_in_url
    from gateway.replicas.rate_limits import RateLimits
    from gateway.secrets import signing_keys
    from memory.storage.operator_sessions import OperatorSessions

    assert settings.admin_token is not None  # with_admin_token gave it one
    async with _database(settings) as sessions:
        auth = OperatorAuth(
            OperatorSessions(sessions),
            signing_keys(settings),
            settings.admin_token.get_secret_value(),
            SystemClock(),
            RateLimits(),
        )
        return sign_in_url(settings, await auth.link())


@app.command()
def doctor() -> None:
    """Check the settings, the database, Redis, the model and each configured channel
    against its platform: one line each, with what to fix; exit 1 if any fails."""
    from gateway.doctor import examine

    try:
        settings = load_settings()
    except ParleyError as exc:
        typer.echo(f"✗ settings: {exc}")
        raise typer.Exit(1) from None
    findings = asyncio.run(examine(settings))
    for finding in findings:
        typer.echo(f"{'✓' if finding.ok else '✗'} {finding.name}: {finding.detail}")
    raise typer.Exit(0 if all(finding.ok for finding in findings) else 1)


@app.command()
def worker(
    check: Annotated[
        bool,
        typer.Option("--check", help="Exit 0 if a worker said it is alive lately, else 1."),
    ] = False,
) -> None:
    """Run archive jobs from Redis (PARLEY_REDIS_URL): an arq worker."""
    from gateway.jobs.arq_worker import healthy, run_worker
    from gateway.logs import configure_logging, secrets_of

    settings = _settings()
    if not settings.redis_url:
        _fail("invalid setting PARLEY_REDIS_URL: `parley worker` needs Redis")
    if check:
        raise typer.Exit(0 if asyncio.run(healthy(settings)) else 1)
    configure_logging(
        settings.log_level.value,
        secrets=secrets_of(settings),
        log_format=settings.log_format.value,
    )
    run_worker(settings)


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    from memory.storage.engine import create_engine
    from memory.storage.migrate import head_revision
    from memory.storage.migrate import migrate as run_migrations

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
    from gateway.inbox.pairing import pending_lines
    from memory.storage.migrate import SchemaOutOfDate

    settings = _settings()
    try:
        lines = asyncio.run(pending_lines(settings))
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))
    typer.echo("\n".join(lines) if lines else "no pairing requests are waiting")


@pairing.command("approve")
def pairing_approve(code: Annotated[str, typer.Argument(help="The code the person got.")]) -> None:
    """Let the person with this pairing code talk to the assistant."""
    from gateway.inbox.pairing import approve
    from memory.storage.migrate import SchemaOutOfDate

    settings = _settings()
    try:
        typer.echo(asyncio.run(approve(settings, code)))
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))


telegram = typer.Typer(help="The Telegram bot's set-up.")
webhook = typer.Typer(help="Where Telegram posts updates: {PARLEY_PUBLIC_URL}/webhooks/telegram.")
telegram.add_typer(webhook, name="webhook")
app.add_typer(telegram, name="telegram")


@webhook.command("set")
def webhook_set() -> None:
    """Tell Telegram to post updates to this gateway (PARLEY_PUBLIC_URL), with the secret."""
    typer.echo(_telegram_step(lambda hooks: hooks.register_webhook()))


@webhook.command("info")
def webhook_info() -> None:
    """Show where Telegram posts updates, how many wait, and its last error."""
    typer.echo(_telegram_step(lambda hooks: hooks.describe_webhook()))


@webhook.command("delete")
def webhook_delete() -> None:
    """Stop Telegram posting updates (for polling, or before moving the gateway)."""
    typer.echo(_telegram_step(lambda hooks: hooks.remove_webhook()))


def _telegram_step(step: Callable[[Webhooks], Coroutine[Any, Any, str]]) -> str:
    from gateway.channels.port import Webhooks
    from gateway.channels.registry import enabled_connectors

    found = [c for c in enabled_connectors(_settings()) if c.channel == "telegram"]
    if not found or not isinstance(found[0], Webhooks):
        _fail("set PARLEY_TELEGRAM_TOKEN first")
    connector: Webhooks = found[0]
    try:
        answer = asyncio.run(step(connector))
    except ParleyError as exc:
        _fail(str(exc))
    return answer


# -- a person's data: export and import (NDJSON, memory.portable.format) ---------------


@app.command("export")
def export_person(
    user_id: Annotated[str, typer.Argument(help="The person's id (GET /api/v1/users).")],
) -> None:
    """Write everything of a person as NDJSON to standard output.

    `parley export ID > file.ndjson`; progress goes to standard error."""
    from memory.portable.export import NoSuchUser
    from memory.storage.migrate import SchemaOutOfDate

    settings = _settings()
    try:
        person = uuid.UUID(user_id)
    except ValueError:
        _fail(f"{user_id!r} is not a person's id")
    try:
        asyncio.run(_export(settings, person, sys.stdout.buffer))
    except NoSuchUser:
        _fail(f"there is no person with the id {person}")
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        sys.stderr.close()


@app.command("import")
def import_file(
    file: Annotated[
        Path, typer.Argument(help="An export (`parley export`).", exists=True, dir_okay=False)
    ],
) -> None:
    """Import a person's data from an export (`parley export`), all or nothing.

    It goes to a new person, or to the person here whose history it is (their identity
    and their conversation's first message); a file naming someone here without that,
    or naming two people, is refused. Importing a file again duplicates nothing."""
    from memory.portable.imports import ExportFormatError, ImportConflict
    from memory.storage.migrate import SchemaOutOfDate

    settings = _settings()
    try:
        with file.open("rb") as handle:
            counts = asyncio.run(_import(settings, handle, file.stat().st_size))
    except (ExportFormatError, ImportConflict) as exc:
        _fail(f"{file}: {exc}")
    except (ParleyError, SchemaOutOfDate) as exc:
        _fail(str(exc))
    typer.echo(f"imported into person {counts.user_id}{' (new)' if counts.user_created else ''}")
    for name in (
        "identities",
        "chunks",
        "messages",
        "profile_lines",
        "retired_facts",
        "schedules",
        "attachments",
    ):
        tally = getattr(counts, name)
        typer.echo(f"{name}: {tally.created} created, {tally.skipped} already here")
    typer.echo(f"transcript_files: {counts.transcript_files} written")
    if counts.conflicts:
        typer.echo(
            f"parley: {counts.conflicts} rows of the file were not imported: this database "
            "holds something else in their place",
            err=True,
        )
        raise typer.Exit(1)


@contextlib.asynccontextmanager
async def _database(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    from memory.storage.engine import create_engine, session_factory
    from memory.storage.migrate import prepare

    engine = create_engine(settings.resolved_database_url)
    try:
        await prepare(engine, migrate_embedded=settings.is_sqlite)
        yield session_factory(engine)
    finally:
        await engine.dispose()


async def _export(settings: Settings, user_id: uuid.UUID, out: BinaryIO) -> None:
    from memory.portable.export import Exports

    async with _database(settings) as sessions:
        lines = Exports(sessions).export_user(user_id, now=datetime.now(UTC))
        header = await anext(lines)  # NoSuchUser before anything is written
        out.write(header.encode())
        counts = json.loads(header)["counts"]
        total = sum(n for name, n in counts.items() if name != "transcripts")
        with typer.progressbar(length=total, label="exporting", file=sys.stderr) as bar:
            async for line in lines:
                out.write(line.encode())
                bar.update(1)
        out.flush()


async def _import(settings: Settings, handle: BinaryIO, size: int) -> ImportCounts:
    from gateway.text import clean
    from gateway.wiring import archive_dir
    from memory.portable.imports import Imports

    async with _database(settings) as sessions:
        imports = Imports(sessions, clean=clean, archive_dir=archive_dir(settings))
        with typer.progressbar(length=size, label="importing", file=sys.stderr) as bar:
            return await imports.import_lines(_lines(handle, bar.update), now=datetime.now(UTC))


def _lines(handle: BinaryIO, advance: Callable[[int], object]) -> Iterator[str]:
    """The file's lines, split at line feeds only (the format escapes every other line
    break), invalid UTF-8 replaced; `advance` is told the bytes read."""
    for raw in handle:
        advance(len(raw))
        yield raw.decode("utf-8", "replace")


def main() -> None:
    app()

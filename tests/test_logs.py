"""`parley serve` logs one JSON line per request with a request id, formats the
libraries' lines the same way, honours PARLEY_LOG_LEVEL, and at no level logs message
text or a secret (a setting's, or a one-time link's token in a path or query)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import FakeLLM, Reply
from tests.support.harness import ADMIN_TOKEN, next_frame
from tests.support.process import REPO, free_port, parley_env, parley_serve, run_python

SECRET_TEXT = "the words only the person and the model may read"
LLM_KEY = "sk-test-key-that-must-not-leak"


def _lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


async def test_serve_writes_an_access_line_per_request_and_no_message_text(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = parley_env(port=str(port), data_dir=str(tmp_path / "data"), log_level="info")
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            token = (await client.post("/webchat/sessions")).json()["token"]
            sent = await client.post(
                "/webchat/messages",
                json={"text": SECRET_TEXT},
                headers={"Authorization": f"Bearer {token}", "X-Request-ID": "trace-42"},
            )
            missing = await client.get("/no/such/page?token=wc1.secret")
        stderr = await process.stop()

    lines = _lines(stderr)
    access = [line for line in lines if line.get("event") == "request"]
    assert sent.status_code == 200
    assert sent.headers["x-request-id"] == "trace-42"
    assert missing.headers["x-request-id"]  # made up when the client sent none
    assert {(a["method"], a["path"], a["status"]) for a in access} >= {
        ("POST", "/webchat/sessions", 201),
        ("POST", "/webchat/messages", 200),
        ("GET", "/no/such/page", 404),
    }
    assert [a["request_id"] for a in access if a["path"] == "/webchat/messages"] == ["trace-42"]
    assert any(line.get("logger") == "uvicorn.error" for line in lines)  # libraries, as JSON
    assert all({"timestamp", "level", "event"} <= set(line) for line in lines)
    assert SECRET_TEXT not in stderr
    assert "wc1.secret" not in stderr


async def test_log_level_warning_keeps_info_lines_out(tmp_path: Path) -> None:
    port = free_port()
    env = parley_env(port=str(port), data_dir=str(tmp_path / "data"), log_level="warning")
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).status_code == 200
        stderr = await process.stop()

    assert not [line for line in _lines(stderr) if line["level"] in ("info", "debug")]


async def test_secrets_in_paths_and_queries_stay_out_of_the_log(tmp_path: Path) -> None:
    port = free_port()
    env = parley_env(port=str(port), data_dir=str(tmp_path / "data"), log_level="info")
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            visitor = (await client.post("/webchat/sessions")).json()["token"]
            bearer = {"Authorization": f"Bearer {visitor}"}
            answer = await client.post(
                "/webchat/messages", json={"text": "/export"}, headers=bearer
            )
            match = re.search(r"/exports/([A-Za-z0-9_-]+)", answer.json()["reply"]["text"])
            assert match is not None, answer.text
            link, export_token = match.group(0), match.group(1)
            # A HEAD or GET spends nothing: the token is still good while these are logged.
            opened = [await client.head(link), await client.get(link)]
            downloaded = await client.post(link)
            spent = await client.get(link)
            verify = await client.get(
                "/webhooks/whatsapp",
                params={"hub.mode": "subscribe", "hub.verify_token": "qzverifysecret"},
            )
        # The older way a socket gives its token: in the query string.
        url = f"ws://127.0.0.1:{port}/webchat/ws?token={visitor}"
        async with connect(url) as websocket:
            assert (await next_frame(websocket))["type"] == "ready"
        # Another site's page: its handshake is refused before it is accepted.
        with pytest.raises(InvalidStatus):
            async with connect(url, origin=Origin("https://elsewhere.example")):
                pass
        stderr = await process.stop()

    assert [r.status_code for r in opened] == [200, 200]
    assert downloaded.status_code == 200
    assert spent.status_code == 404
    assert verify.status_code == 404  # WhatsApp is not configured; the query is logged anyway
    assert export_token not in stderr
    assert visitor not in stderr
    assert "qzverifysecret" not in stderr
    lines = _lines(stderr)
    exports = [
        (a["method"], a["path"], a["status"]) for a in lines if "/exports/" in a.get("path", "")
    ]
    assert exports == [
        ("HEAD", "/exports/[redacted]", 200),
        ("GET", "/exports/[redacted]", 200),
        ("POST", "/exports/[redacted]", 200),
        ("GET", "/exports/[redacted]", 404),
    ]
    sockets = [a for a in lines if a.get("event") == "websocket"]
    assert [(a["path"], a["status"]) for a in sockets] == [
        ("/webchat/ws", 101),
        ("/webchat/ws", 403),
    ]


async def test_at_debug_no_line_carries_a_secret_or_what_was_said(
    database_url: str, tmp_path: Path, llm: FakeLLM
) -> None:
    said, answered = "qzsaidword my cat is Tom", "qzansweredword Tom is a fine name"
    llm.script(Reply(answered))
    port = free_port()
    async with tg.fake_telegram() as fake:
        env = parley_env(
            port=str(port),
            data_dir=str(tmp_path / "data"),
            database_url=database_url,
            log_level="debug",
            admin_token=ADMIN_TOKEN,
            public_url="https://parley.example",
            telegram_token=fake.token,
            telegram_webhook_secret=tg.WEBHOOK_SECRET,
            telegram_api_url=fake.base_url,
            telegram_policy="open",
            llm_provider="openai",
            llm_base_url=llm.openai_base,
            llm_api_key=LLM_KEY,
            llm_model="fake-model",
        )
        async with parley_serve(env, tmp_path) as process:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                taken = await client.post(
                    "/webhooks/telegram",
                    json=tg.text_update(4242, said),
                    headers={"X-Telegram-Bot-Api-Secret-Token": tg.WEBHOOK_SECRET},
                )
                await fake.wait_until(lambda f: f.texts(4242) == [answered])
            stderr = await process.stop()

    assert taken.status_code == 200
    assert fake.calls_of("setWebhook")  # the secret went out, and could have been logged
    events = {line["event"] for line in _lines(stderr)}
    assert {"Telegram webhook registered", "request"} <= events  # the log was read whole
    for secret in (tg.TOKEN, tg.WEBHOOK_SECRET, LLM_KEY, ADMIN_TOKEN):
        assert secret not in stderr
    assert "qzsaidword" not in stderr
    assert "qzansweredword" not in stderr


# A library this gateway does not know, writing secrets as libraries do: in a URL, in
# parameters (plain and percent-encoded), in JSON, in a traceback.
LEAKY_LIBRARY = """
import logging, urllib.parse, structlog
from gateway.logs import configure_logging, secrets_of
from gateway.settings import load_settings

settings = load_settings()
configure_logging("debug", secrets=secrets_of(settings))
bot = settings.telegram_token.get_secret_value()
app_secret = settings.whatsapp_app_secret.get_secret_value()
library = logging.getLogger("some.library")
library.debug("POST https://api.example/bot%s/send", bot)
library.info("params %r", {"app_secret": app_secret})
library.info("body %s", urllib.parse.urlencode({"app_secret": app_secret}))
structlog.get_logger("ours").warning("connecting", dsn=settings.database_url)
try:
    raise ValueError(f"refused key {settings.llm_api_key.get_secret_value()}")
except ValueError:
    library.exception("failed")
"""


def test_every_secret_of_the_settings_is_cut_out_of_any_line(tmp_path: Path) -> None:
    env = parley_env(
        data_dir=str(tmp_path / "data"),
        telegram_token="123456789:AAleaky-library-token",
        telegram_mode="polling",
        whatsapp_app_secret='qz app/secret+with&marks"',
        database_url="postgresql://parley:qzdbpassword@127.0.0.1:1/parley",
        llm_api_key="sk-leaky-library-key",
    )
    done = run_python("-c", LEAKY_LIBRARY, env=env, cwd=REPO)

    assert done.returncode == 0, done.stderr
    lines = _lines(done.stderr)
    assert len(lines) == 5, done.stderr
    for secret in ("AAleaky-library-token", "qzdbpassword", "sk-leaky-library-key", "qz"):
        assert secret not in done.stderr
    assert [str(line).count("[redacted]") for line in lines] == [1, 1, 1, 1, 1], done.stderr


async def test_console_format_is_readable_and_keeps_the_access_fields(tmp_path: Path) -> None:
    """`PARLEY_LOG_FORMAT=console` writes readable lines even into a pipe (a terminal
    gets them by default): no JSON, the access line's fields still there, secrets cut."""
    port = free_port()
    env = parley_env(
        port=str(port),
        data_dir=str(tmp_path / "data"),
        log_format="console",
        admin_token="qzconsole-admin-token-0123",
    )
    async with parley_serve(env, tmp_path) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            seen = await client.get(
                "/api/v1/stats", headers={"Authorization": "Bearer qzconsole-admin-token-0123"}
            )
        stderr = await process.stop()

    assert seen.status_code == 200
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines)
    [access] = [line for line in lines if "request" in line and "/api/v1/stats" in line]
    for field in ("method=GET", "path=/api/v1/stats", "status=200", "ms=", "request_id="):
        assert field in access, access
    assert "qzconsole-admin-token" not in stderr


def test_an_unknown_log_format_stops_the_start_naming_the_setting(tmp_path: Path) -> None:
    env = parley_env(data_dir=str(tmp_path / "data"), log_format="xml")
    done = run_python("-m", "gateway", "serve", env=env, cwd=REPO)

    assert done.returncode != 0
    assert "log_format" in (done.stderr + done.stdout).lower()

"""`parley doctor` and `parley telegram webhook …` (DESIGN §13), run as an operator runs
them, against the fakes of every platform and a model: all well, one line each and exit
0; each broken piece reported by name with what to fix, and exit 1; never a secret."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.fakes import discord_api as dc
from tests.fakes import graph_api as wa
from tests.fakes import telegram_api as tg
from tests.fakes.llm_server import Fail, FakeLLM, Reply
from tests.support.process import (
    REPO,
    free_port,
    parley_env,
    parley_output,
    ready,
    start_parley,
    stop_process,
)


@contextlib.asynccontextmanager
async def _platforms() -> AsyncIterator[tuple[tg.FakeTelegram, dc.FakeDiscord, wa.FakeGraph]]:
    async with (
        tg.fake_telegram() as telegram,
        dc.fake_discord() as discord,
        wa.fake_graph() as graph,
    ):
        yield telegram, discord, graph


def _channels(
    telegram: tg.FakeTelegram, discord: dc.FakeDiscord, graph: wa.FakeGraph
) -> dict[str, str]:
    values: dict[str, Any] = (
        tg.telegram_settings(telegram) | dc.discord_settings(discord) | wa.whatsapp_settings(graph)
    )
    return {key: str(value) for key, value in values.items()}


def _lines(out: str) -> dict[str, str]:
    """Each check's line, by its name: '✓ detail' or '✗ detail'."""
    found = {}
    for line in out.splitlines():
        mark, _, rest = line.partition(" ")
        name, _, detail = rest.partition(": ")
        found[name] = f"{mark} {detail}"
    return found


def _secrets(env: dict[str, str]) -> list[str]:
    names = ("TOKEN", "SECRET", "KEY")
    return [v for k, v in env.items() if k.startswith("PARLEY_") and any(n in k for n in names)]


async def test_a_deployment_set_up_right_passes_every_check(
    database_url: str, tmp_path: Path, llm: FakeLLM, redis_url: str
) -> None:
    llm.script(Reply("pong"))
    port = free_port()
    async with _platforms() as (telegram, discord, graph):
        env = parley_env(
            database_url=database_url,
            redis_url=redis_url,
            data_dir=str(tmp_path / "data"),
            port=str(port),
            public_url=f"http://127.0.0.1:{port}",
            **llm.settings(),
            **_channels(telegram, discord, graph),
        )
        served = await start_parley("serve", env=env, cwd=REPO)
        try:
            # Started, the gateway has told Telegram where to post (PARLEY_PUBLIC_URL).
            await telegram.wait_until(lambda f: f.webhook_url.endswith("/webhooks/telegram"), 60)
            await ready(port)
            code, out = await parley_output("doctor", env=env)
        finally:
            await stop_process(served, signal.SIGTERM, 30)

    lines = _lines(out)
    assert code == 0, out
    assert set(lines) == {
        "settings",
        "database",
        "Redis",
        "model",
        "Telegram bot",
        "Telegram webhook",
        "Discord bot",
        "Discord message content",
        "WhatsApp number",
        "WhatsApp webhook",
    }, out
    assert all(line.startswith("✓") for line in lines.values()), out
    assert lines["Telegram bot"] == f"✓ @{tg.BOT_USERNAME}"
    assert lines["Telegram webhook"].startswith(f"✓ http://127.0.0.1:{port}/webhooks/telegram")
    assert lines["model"].startswith("✓ fake-model at ")
    assert not any(secret in out for secret in _secrets(env))


async def test_each_broken_piece_is_named_with_what_to_fix(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script(Fail(503, message="the model server is overloaded"))
    async with _platforms() as (telegram, discord, graph):
        discord.refuse_message_content = True
        env = parley_env(
            database_url=f"postgresql+asyncpg://parley@127.0.0.1:{free_port()}/nowhere",
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            data_dir=str(tmp_path / "data"),
            **llm.settings(),
            **_channels(telegram, discord, graph)
            | {
                "telegram_token": "987654321:AA-a-token-Telegram-does-not-know",
                "whatsapp_phone_number_id": "000000000000000",
            },
        )
        code, out = await parley_output("doctor", env=env)

    lines = _lines(out)
    assert code == 1, out
    assert lines["settings"].startswith("✓")
    assert lines["database"].startswith("✗ cannot connect"), out
    assert "PARLEY_DATABASE_URL" in lines["database"]
    assert lines["Redis"].startswith("✗"), out
    assert "PARLEY_REDIS_URL" in lines["Redis"]
    assert lines["model"].startswith("✗ fake-model at "), out
    assert "503" in lines["model"]
    assert lines["Telegram bot"].startswith("✗ PARLEY_TELEGRAM_TOKEN"), out
    assert "Telegram webhook" not in lines  # nothing to ask without a token
    assert lines["Discord bot"] == f"✓ {dc.BOT_NAME}"
    assert lines["Discord message content"].startswith("✗ Discord refused"), out
    assert lines["WhatsApp number"].startswith("✗ PARLEY_WHATSAPP_PHONE_NUMBER_ID"), out
    assert lines["WhatsApp webhook"].startswith("✗ PARLEY_PUBLIC_URL is unset"), out
    assert not any(secret in out for secret in _secrets(env))


async def test_a_bad_setting_is_one_failed_line(tmp_path: Path) -> None:
    env = parley_env(data_dir=str(tmp_path / "data"), webchat_policy="sometimes")
    code, out = await parley_output("doctor", env=env)

    assert code == 1
    assert out.startswith("✗ settings: "), out
    assert "PARLEY_WEBCHAT_POLICY" in out or "webchat_policy" in out


async def test_a_model_set_up_without_its_provider_is_named(tmp_path: Path) -> None:
    # The trap an operator fell into: a base URL and a model, no provider, and the
    # offline stand-in answering as if nothing were wrong.
    env = parley_env(
        data_dir=str(tmp_path / "data"),
        llm_base_url="http://127.0.0.1:9/v1",
        llm_model="llama3.1",
    )
    code, out = await parley_output("doctor", env=env)

    assert code == 1, out
    model = _lines(out)["model"]
    assert model.startswith("✗ PARLEY_LLM_BASE_URL and PARLEY_LLM_MODEL set, but"), out
    assert "PARLEY_LLM_PROVIDER=openai" in model


async def test_telegram_webhook_commands_register_show_and_remove_it(
    tmp_path: Path, llm: FakeLLM
) -> None:
    async with tg.fake_telegram() as telegram:
        env = parley_env(
            data_dir=str(tmp_path / "data"),
            public_url="https://parley.example",
            **{k: str(v) for k, v in tg.telegram_settings(telegram).items()},
        )
        telegram.webhook_url = "https://an-old-host.example/webhooks/telegram"
        before = _lines((await parley_output("doctor", env=env))[1])["Telegram webhook"]
        set_code, set_out = await parley_output("telegram", "webhook", "set", env=env)
        registered = (telegram.webhook_url, telegram.webhook_secret)
        telegram.webhook_error = "Connection refused"
        info_code, info_out = await parley_output("telegram", "webhook", "info", env=env)
        after = _lines((await parley_output("doctor", env=env))[1])["Telegram webhook"]
        delete_code, _ = await parley_output("telegram", "webhook", "delete", env=env)
        polling = env | {"PARLEY_TELEGRAM_MODE": "polling"}
        telegram.webhook_url = "https://parley.example/webhooks/telegram"
        stale = _lines((await parley_output("doctor", env=polling))[1])["Telegram webhook"]

    assert before.startswith("✗ registered at https://an-old-host.example/webhooks/telegram")
    assert "`parley telegram webhook set`" in before
    assert (set_code, info_code, delete_code) == (0, 0, 0)
    assert "https://parley.example/webhooks/telegram" in set_out
    assert registered == ("https://parley.example/webhooks/telegram", tg.WEBHOOK_SECRET)
    assert "last error: Connection refused" in info_out
    assert after.startswith("✗ Telegram's last post to https://parley.example/webhooks/telegram")
    assert stale.startswith("✗ registered at")
    assert "webhook delete" in stale
    assert tg.WEBHOOK_SECRET not in set_out + info_out

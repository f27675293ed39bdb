"""Each connector is handed its own settings, cut from the whole: the same environment
variables fill them, and none carries the database URL, the admin token or another
channel's secrets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.channels.connector_settings import (
    discord_settings,
    telegram_settings,
    webchat_settings,
    whatsapp_settings,
)
from gateway.settings import Settings, TelegramMode, load_settings

ENVIRONMENT = {
    "PARLEY_DATABASE_URL": "postgresql://parley:database-password@db/parley",
    "PARLEY_ADMIN_TOKEN": "admin-token-0123456789abcdef",
    "PARLEY_SECRET_KEY": "signing-key-0123456789abcdef",
    "PARLEY_PUBLIC_URL": "https://parley.example",
    "PARLEY_TELEGRAM_TOKEN": "123:telegram-token",
    "PARLEY_TELEGRAM_WEBHOOK_SECRET": "telegram-webhook-secret",
    "PARLEY_TELEGRAM_API_URL": "http://127.0.0.1:9001",
    "PARLEY_DISCORD_TOKEN": "discord-token",
    "PARLEY_DISCORD_BACKFILL_HOURS": "2.5",
    "PARLEY_DISCORD_BACKFILL_MESSAGES": "7",
    "PARLEY_WHATSAPP_TOKEN": "whatsapp-token",
    "PARLEY_WHATSAPP_APP_SECRET": "whatsapp-app-secret",
    "PARLEY_WHATSAPP_VERIFY_TOKEN": "whatsapp-verify-token",
    "PARLEY_WHATSAPP_PHONE_NUMBER_ID": "15550001",
    "PARLEY_WEBCHAT_ALLOWED_ORIGINS": "https://shop.example",
    "PARLEY_WEBCHAT_SOCKETS_PER_VISITOR": "3",
}


# What each channel's settings must hold, and no other's may; the operators' own
# (the admin token) belong to none.
SECRETS = {
    "telegram": {"123:telegram-token", "telegram-webhook-secret"},
    "discord": {"discord-token"},
    "whatsapp": {"whatsapp-token", "whatsapp-app-secret", "whatsapp-verify-token"},
    "webchat": {"signing-key-0123456789abcdef"},
    "operators": {"admin-token-0123456789abcdef"},
}


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    return load_settings(_env_file=None, data_dir=tmp_path)


def _values(slice_: object) -> set[str]:
    """Every string a slice holds, secrets revealed."""
    found = set()
    for field in dataclasses.fields(slice_):  # type: ignore[arg-type]
        value = getattr(slice_, field.name)
        if callable(value):
            value = value()
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        for one in value if isinstance(value, tuple) else (value,):  # keys in a rotation
            found.add(one.decode() if isinstance(one, bytes) else str(one))
    return found


def test_each_connector_reads_its_own_variables(settings: Settings) -> None:
    telegram = telegram_settings(settings)
    discord = discord_settings(settings)
    whatsapp = whatsapp_settings(settings)
    webchat = webchat_settings(settings)

    assert telegram is not None
    assert discord is not None
    assert whatsapp is not None
    assert telegram.token.get_secret_value() == "123:telegram-token"
    assert telegram.mode is TelegramMode.WEBHOOK
    assert telegram.public_url == "https://parley.example"
    assert telegram.api_url == "http://127.0.0.1:9001"
    assert (discord.backfill_hours, discord.backfill_messages) == (2.5, 7)
    assert whatsapp.verify_token.get_secret_value() == "whatsapp-verify-token"
    assert whatsapp.phone_number_id == "15550001"
    assert webchat.allowed_origins == ("https://shop.example",)
    assert webchat.sockets_per_visitor == 3
    assert webchat.signing_keys() == (b"signing-key-0123456789abcdef",)


def test_no_connector_sees_the_database_the_operators_or_another_channel(
    settings: Settings,
) -> None:
    slices = {
        "telegram": telegram_settings(settings),
        "discord": discord_settings(settings),
        "whatsapp": whatsapp_settings(settings),
        "webchat": webchat_settings(settings),
    }

    for channel, own in slices.items():
        held = _values(own)
        others = set().union(*(SECRETS[other] for other in SECRETS if other != channel))
        assert SECRETS[channel] <= held
        assert not held & others, channel
        assert not any("database-password" in value for value in held), channel


def test_an_unconfigured_channel_has_no_settings(tmp_path: Path) -> None:
    bare = Settings(_env_file=None, data_dir=tmp_path)

    assert telegram_settings(bare) is None
    assert discord_settings(bare) is None
    assert whatsapp_settings(bare) is None
    assert webchat_settings(bare).identity_secret is None  # the web chat is always on


def test_the_web_chat_reads_its_signing_key_when_it_starts(tmp_path: Path) -> None:
    """Without PARLEY_SECRET_KEY the key is a file in the data dir: cutting the
    settings creates nothing; reading the key does, once."""
    webchat = webchat_settings(Settings(_env_file=None, data_dir=tmp_path))

    assert list(tmp_path.iterdir()) == []
    keys = webchat.signing_keys()
    assert len(keys) == 1
    assert keys[0]
    assert webchat.signing_keys() == keys  # the same file, read again

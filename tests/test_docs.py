"""The docs keep up with the code: every setting has a description, and the
configuration page is what `Settings` says today."""

from __future__ import annotations

from pathlib import Path

from gateway.settings import Settings
from gateway.settings_reference import settings_reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_every_setting_says_what_it_does() -> None:
    undescribed = [name for name, field in Settings.model_fields.items() if not field.description]

    assert undescribed == []


def test_the_configuration_page_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == settings_reference(), (
        "docs/configuration.md is stale: run "
        "`.venv/bin/python -m gateway.settings_reference > docs/configuration.md`"
    )
    assert all(f"`PARLEY_{name.upper()}`" in PAGE.read_text() for name in Settings.model_fields)

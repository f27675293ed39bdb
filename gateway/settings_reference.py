"""The settings reference (`docs/configuration.md`), written from `Settings` itself: every
`PARLEY_` variable with its default and its description (each field's docstring), so
the page cannot drift from the code. `python -m gateway.settings_reference` prints it.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic.fields import FieldInfo

from gateway.settings import Settings

HEADER = """# Configuration

Every setting is an environment variable (or a line of a `.env` file in the working
directory). A bad value stops `parley serve` with one line naming the variable;
`parley doctor` checks the whole set-up against the services it names.

This page is generated from the code (`python -m gateway.settings_reference`); a test
fails when it is stale.

| Variable | Default | What it does |
| --- | --- | --- |
"""


def settings_reference() -> str:
    rows = [_row(name, field) for name, field in Settings.model_fields.items()]
    return HEADER + "\n".join(rows) + "\n"


def _row(name: str, field: FieldInfo) -> str:
    description = " ".join((field.description or "").split()).replace("|", "\\|")
    return f"| `PARLEY_{name.upper()}` | {_default(field.default)} | {description} |"


def _default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{','.join(str(v) for v in value)}`" if value else "empty"
    if isinstance(value, Path):
        return f"`{value.as_posix()}`"
    if value == "":
        return "empty"
    return f"`{value}`"


if __name__ == "__main__":
    print(settings_reference(), end="")

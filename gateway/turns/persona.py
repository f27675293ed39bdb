"""The persona: a Markdown file that opens every system prompt."""

from __future__ import annotations

from pathlib import Path

from gateway.errors import ConfigError

DEFAULT_PERSONA = Path(__file__).with_name("persona.md")


def load_persona(path: Path | None) -> str:
    source = path or DEFAULT_PERSONA
    try:
        text = source.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"invalid setting PARLEY_PERSONA_FILE: cannot read {source}: {exc.strerror}"
        ) from None
    if not text:
        raise ConfigError(f"invalid setting PARLEY_PERSONA_FILE: {source} is empty")
    return text

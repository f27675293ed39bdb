"""The children's logs in brief, for a failed run: warnings and errors counted by event,
then the last of them (and of plain error lines) from each log. The logs themselves stay
under the test's directory."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NOTABLE_LEVELS = ("warning", "error", "critical")
ERROR = re.compile(r"error|exception", re.IGNORECASE)


def digest(logs: Iterable[Path], lines: int = 30) -> str:
    out = []
    for path in logs:
        if not path.exists():
            continue
        content = path.read_text(errors="replace").splitlines()
        events: Counter[str] = Counter()
        notable = []
        for line in content:
            entry = _json_entry(line)
            if entry is None:
                if "Traceback" in line:
                    events["Traceback"] += 1
                if _complaint(line):
                    notable.append(line[:300])  # a traceback's last line, arq's complaints
            elif entry.get("level") in NOTABLE_LEVELS:
                notable.append(_brief(entry))
                events[f"{entry.get('level')}: {entry.get('event')}"] += 1
        out.append(f"==== {path.name}: {len(content)} lines; {dict(events.most_common(15))}")
        out += notable[-lines:]
    return "\n".join(out)


def _complaint(line: str) -> bool:
    """A plain line about an error, not inside a (rich) traceback's box."""
    return not line.startswith(("│", "╭", "╰")) and ERROR.search(line) is not None


def _brief(entry: dict[str, Any]) -> str:
    """A structlog JSON line in one short line: its exception by its last line only."""
    fields = {k: v for k, v in entry.items() if k not in ("timestamp", "level", "event")}
    error = str(fields.pop("exception", "")).strip().splitlines()
    brief = f"{entry.get('timestamp', '')} {entry.get('level')}: {entry.get('event')} {fields}"
    return (brief + (f" | {error[-1]}" if error else ""))[:400]


def _json_entry(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None

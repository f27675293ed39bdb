"""The export format: one JSON object per line (NDJSON), UTF-8.

Line 1 is the header, `{"format": "parley-export", "version": 1, "exported_at",
"user": {...}, "counts": {...}}`; every other line is a record with a `"type"`, in this
order: `identity`, `conversation` (the person's own), `chunk` (highest level first, so
a parent comes before its children), `message` (by seq), `attachment` (a file of a
message, named by its seq, with its bytes in base64 and their SHA-256), `profile_line`
(in profile order), `retired_fact`, `schedule` (a reminder or follow-up of the
conversation, with its firings). Times are ISO 8601 with their offset. The conversation names
its first message (`first_message`: seq and time), which tells one history from another
and is what shows that a file is the history of a person here (owner.py).

Nothing refers to another row by a database id: an author is `[channel, external_id]`,
a chunk is `[level, seq_start]` (unique within the conversation), so a file can be
imported into any database, and again without duplicating anything.

A reader refuses a newer version and anything that is not this format, naming the line
(`ExportFormatError`); text is cleaned by the caller's rules on the way in (no NUL, no
lone surrogates: what no database stores).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

FORMAT = "parley-export"
VERSION = 1

# Record types, in the order they appear (a record never comes after a later type).
IDENTITY = "identity"
CONVERSATION = "conversation"
CHUNK = "chunk"
MESSAGE = "message"
ATTACHMENT = "attachment"
PROFILE_LINE = "profile_line"
RETIRED_FACT = "retired_fact"
SCHEDULE = "schedule"
ORDER = (
    IDENTITY,
    CONVERSATION,
    CHUNK,
    MESSAGE,
    ATTACHMENT,
    PROFILE_LINE,
    RETIRED_FACT,
    SCHEDULE,
)

_MAX_INT64 = 2**63 - 1

E = TypeVar("E", bound=StrEnum)

# A chunk within its conversation: (level, seq_start).
ChunkKey = tuple[int, int]
# An identity: (channel, external_id).
AuthorKey = tuple[str, str]


class ExportFormatError(ValueError):
    """The stream is not an export this Parley can read; `line` says where (1-based)."""

    def __init__(self, line: int, problem: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {problem}")


def encode(record: dict[str, Any]) -> str:
    """One line of the stream, newline included."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def parse(raw: str, line: int) -> dict[str, Any] | None:
    """The object on one line; None for a blank line."""
    if not raw.strip():
        return None
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise ExportFormatError(line, "not a JSON object") from None
    if not isinstance(data, dict):
        raise ExportFormatError(line, "not a JSON object")
    return data


def check_header(data: dict[str, Any], line: int) -> None:
    """Refuse what is not a header this Parley reads: another format, a newer version."""
    if data.get("format") != FORMAT:
        raise ExportFormatError(line, f"not a {FORMAT} header (the first line must be one)")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportFormatError(line, "the header has no valid version")
    if version > VERSION:
        raise ExportFormatError(
            line,
            f"format version {version} is newer than this Parley reads ({VERSION}); "
            "upgrade Parley to import it",
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Fields:
    """Typed reads of one record's fields; a missing or wrong field is an
    `ExportFormatError` naming the line. Text passes through `clean`."""

    def __init__(self, data: dict[str, Any], line: int, clean: Callable[[str], str]) -> None:
        self.data = data
        self.line = line
        self.clean = clean

    def error(self, problem: str) -> ExportFormatError:
        return ExportFormatError(self.line, problem)

    def _get(self, name: str, kinds: type | tuple[type, ...], what: str) -> Any:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is int):
            raise self.error(f"{name!r} must be {what}")
        return value

    def _required(self, name: str, value: Any) -> Any:
        if value is None:
            raise self.error(f"{name!r} is missing")
        return value

    def text_or_none(self, name: str, *, limit: int | None = None, cut: bool = False) -> str | None:
        """Text, cleaned; longer than `limit` is cut (`cut`) or refused (an id must
        never be cut: a shorter id could name someone else)."""
        value = self._get(name, str, "text")
        if value is None:
            return None
        value = self.clean(value)
        if limit is not None and len(value) > limit:
            if not cut:
                raise self.error(f"{name!r} is longer than {limit} characters")
            value = value[:limit]
        return value

    def text(self, name: str, *, limit: int | None = None, cut: bool = False) -> str:
        return str(self._required(name, self.text_or_none(name, limit=limit, cut=cut)))

    def integer_or_none(self, name: str) -> int | None:
        value = self._get(name, int, "a whole number")
        if value is not None and not 0 <= value <= _MAX_INT64:
            raise self.error(f"{name!r} is out of range")
        return None if value is None else int(value)

    def integer(self, name: str) -> int:
        return int(self._required(name, self.integer_or_none(name)))

    def flag(self, name: str) -> bool:
        return bool(self._required(name, self._get(name, bool, "true or false")))

    def time_or_none(self, name: str) -> datetime | None:
        value = self._get(name, str, "a time")
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise self.error(f"{name!r} is not an ISO 8601 time") from None
        if parsed.tzinfo is None:
            raise self.error(f"{name!r} has no UTC offset")
        return parsed

    def time(self, name: str) -> datetime:
        value: datetime = self._required(name, self.time_or_none(name))
        return value

    def choice_or_none(self, name: str, values: type[E]) -> E | None:
        value = self._get(name, str, "text")
        if value is None:
            return None
        try:
            return values(value)
        except ValueError:
            allowed = ", ".join(member.value for member in values)
            raise self.error(f"{name!r} must be one of {allowed}") from None

    def choice(self, name: str, values: type[E]) -> E:
        value: E = self._required(name, self.choice_or_none(name, values))
        return value

    def chunk_key(self, name: str) -> ChunkKey | None:
        pair = self._pair(name, int)
        return None if pair is None else (int(pair[0]), int(pair[1]))

    def author_key(self, name: str) -> AuthorKey | None:
        pair = self._pair(name, str)
        return None if pair is None else (self.clean(pair[0]), self.clean(pair[1]))

    def _pair(self, name: str, kind: type) -> list[Any] | None:
        value = self._get(name, list, "a pair")
        if value is None:
            return None
        if len(value) != 2 or not all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"{name!r} must be a pair of {kind.__name__}")
        return list(value)

"""Tidying a profile: the model proposes numbered edits, never a rewrite."""

from __future__ import annotations

from memory.profile.extraction import json_object
from memory.profile.facts import Edit, EditError, Remove, Replace, Shorten

TIDY_SYSTEM = (
    "You keep a person's profile lean. It is sent with every request, so it should hold "
    "lasting things — who they are, the people around them, how they like to work, what "
    "they are building, upcoming events — not details of finished one-off tasks, which "
    "the archive already keeps. You get the profile as numbered lines, recent summaries "
    "and today's date. Answer with JSON only, a list of edits: "
    '{"edits": [{"remove": [3, 8]}, {"shorten": 5, "to": "shorter text"}, '
    '{"replace": [10, 11, 12], "with": "one line that says what those said"}]}. '
    "Never edit a line twice; a shortened or replacing line must be shorter. Lines you "
    "do not mention stay exactly as they are. Aim for about {target} characters in all."
)


def parse_edits(answer: str) -> list[Edit]:
    """Edits from the model's answer; `EditError` for anything off-format."""
    try:
        data = json_object(answer)
    except ValueError as exc:
        raise EditError(str(exc)) from None
    raw = data.get("edits")
    if not isinstance(raw, list):
        raise EditError("the answer has no list of edits")
    return [_edit(item) for item in raw]


def _edit(item: object) -> Edit:
    if not isinstance(item, dict):
        raise EditError(f"not an edit: {item!r}")
    if set(item) == {"remove"}:
        return Remove(_numbers(item["remove"]))
    if set(item) == {"shorten", "to"} and isinstance(item["to"], str):
        (line,) = _numbers([item["shorten"]])
        return Shorten(line, item["to"])
    if set(item) == {"replace", "with"} and isinstance(item["with"], str):
        return Replace(_numbers(item["replace"]), item["with"])
    raise EditError(f"not an edit: {item!r}")


def _numbers(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in value
    ):
        raise EditError(f"line numbers must be a list of integers, not {value!r}")
    return tuple(value)

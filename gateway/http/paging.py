"""Cursor paging: lists answer `{"items": [...], "next_cursor": str | null}`.

A cursor is opaque and tamper-proof: the position it holds is signed together with
the list and the filters it belongs to, so a cursor edited by hand, or carried to
another list or another filter, is refused rather than read.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Generic, Protocol, TypeVar

from fastapi import Query
from pydantic import BaseModel

from gateway.http.problems import ApiError
from gateway.secrets import signer

T = TypeVar("T")
Position = list[Any]

CursorQuery = Annotated[
    str | None, Query(max_length=512, description="`next_cursor` of the page before")
]
LimitQuery = Annotated[int, Query(ge=1, le=500, description="items per page")]


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None


class Cursors:
    def __init__(self, keys: Sequence[bytes]) -> None:
        # A key of its own: a cursor can never pass for a token signed elsewhere.
        self._signer = signer(keys, "parley api cursor")

    def make(self, scope: str, position: Position) -> str:
        payload = json.dumps(position, separators=(",", ":")).encode()
        signature = self._signer.get_signature(_signed(scope, payload)).decode()
        return f"{_b64(payload)}.{signature}"

    def read(self, scope: str, cursor: str | None) -> Position | None:
        """The position `cursor` holds, or None for the first page."""
        if cursor is None:
            return None
        encoded, _, signature = cursor.partition(".")
        try:
            payload = _unb64(encoded)
        except (binascii.Error, ValueError):
            raise _bad() from None
        if not cursor.isascii() or not self._signer.verify_signature(
            _signed(scope, payload), signature.encode()
        ):
            raise _bad()
        position = json.loads(payload)
        if not isinstance(position, list):
            raise _bad()
        return position

    def cut(
        self, scope: str, items: list[T], limit: int, position: Callable[[T], Position]
    ) -> tuple[list[T], str | None]:
        """The page of `items` (fetched `limit + 1`: one more means another page
        follows) and the cursor to the next, at `position(last item shown)`."""
        shown = items[:limit]
        after = self.make(scope, position(shown[-1])) if len(items) > limit else None
        return shown, after


def _signed(scope: str, payload: bytes) -> bytes:
    return scope.encode() + b"\0" + payload


class Created(Protocol):
    @property
    def created_at(self) -> datetime: ...
    @property
    def id(self) -> uuid.UUID: ...


def by_creation(item: Created) -> Position:
    """The position of an item in a list ordered newest first by creation."""
    return [item.created_at.isoformat(), str(item.id)]


def created_after(position: Position | None) -> tuple[datetime, uuid.UUID] | None:
    """What `by_creation` wrote, read back (a signed cursor holds only what we wrote)."""
    if position is None:
        return None
    return datetime.fromisoformat(position[0]), uuid.UUID(position[1])


def scope(name: str, **filters: object) -> str:
    """The list and filters a cursor is good for."""
    return name + "?" + json.dumps(filters, sort_keys=True, default=str)


def _bad() -> ApiError:
    return ApiError(422, "the cursor is not one this list gave out", code="invalid_cursor")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not ASCII")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

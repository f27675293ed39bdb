"""INSERT … ON CONFLICT DO NOTHING, in whichever dialect the session speaks.

A unique key that is already taken then costs no exception and no rollback: the
statement returns no row, and the caller reads the row that won.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


def insert_or_skip(session: AsyncSession, table: Any) -> Any:
    """An insert into `table` (a table or an ORM class) that skips a row conflicting
    with any unique key.

    Typed `Any` because the two dialects' `Insert` classes share no public base that
    carries `on_conflict_do_nothing`."""
    return skipping_insert(session.get_bind().dialect.name, table)


@functools.cache
def skipping_insert(dialect: str, table: Any) -> Any:
    """`insert_or_skip` for `dialect`, built once: a statement is immutable, and one
    whose values are given to `execute` costs a hot path no construction and no
    cache key."""
    return dialect_insert(dialect, table).on_conflict_do_nothing()


def dialect_insert(dialect: str, table: Any) -> Any:
    """An insert into `table` in `dialect`'s own form, the one with `on_conflict_do_…`
    (an upsert's start)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return insert(table)

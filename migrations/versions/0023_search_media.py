"""search: a message's files line (a voice note's transcript, an image's description)
is searched with its text

SQLite: `messages_fts` is made again over two columns, text and media, with its
triggers, and rebuilt from the rows. Postgres: the message index is over the text and
the files line together; queries spell the expression the same way.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 00:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_messages_text_search"
_TOKENIZE = "tokenize='unicode61 remove_diacritics 2'"


def _sqlite(columns: tuple[str, ...]) -> list[str]:
    """`messages_fts` over `columns`, its triggers, filled from the rows (as 0008 did
    for the text alone)."""
    names = ", ".join(columns)
    old = ", ".join(f"old.{c}" for c in columns)
    new = ", ".join(f"new.{c}" for c in columns)
    remove = (
        f"INSERT INTO messages_fts(messages_fts, rowid, {names}) VALUES ('delete', old.id, {old});"
    )
    add = f"INSERT INTO messages_fts(rowid, {names}) VALUES (new.id, {new});"
    return [
        *(f"DROP TRIGGER IF EXISTS messages_fts_{t}" for t in ("insert", "delete", "update")),
        "DROP TABLE IF EXISTS messages_fts",
        f"CREATE VIRTUAL TABLE messages_fts USING fts5({names}, content='messages', "
        f"content_rowid='id', {_TOKENIZE})",
        f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN {add} END",
        f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN {remove} END",
        f"CREATE TRIGGER messages_fts_update AFTER UPDATE OF {names} ON messages "
        f"BEGIN {remove} {add} END",
        "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    ]


def _postgres(expression: str) -> None:
    op.drop_index(_INDEX, table_name="messages")
    op.create_index(
        _INDEX,
        "messages",
        [sa.text(f"to_tsvector('simple', {expression})")],
        postgresql_using="gin",
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _sqlite(("text", "media")):
            op.execute(statement)
        return
    _postgres("text || ' ' || coalesce(media, '')")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _sqlite(("text",)):
            op.execute(statement)
        return
    _postgres("text")

"""search: full-text indexes over message text and level-0 transcripts

SQLite: FTS5 tables with external content (the text stays only in `messages` and
`chunks`; the index points at their rows), kept current by triggers, filled from the
rows already there. Postgres: GIN expression indexes over `to_tsvector('simple', ...)`,
which Postgres keeps current itself.

A later migration that rebuilds `messages` or `chunks` on SQLite (batch mode: copy,
drop, rename) drops these triggers with the old table: it must create them again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 17:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (FTS table, content table, indexed column). Names written out here, not imported: a
# migration is a record of what it did.
_FTS = (("messages_fts", "messages", "text"), ("chunks_fts", "chunks", "transcript"))

# (index, table, column). 'simple' lowercases and splits, with no stemming and no stop
# words: the gateway is multilingual, and an English (or any one language's) stemmer
# would mangle words in every other language.
_GIN = (
    ("ix_messages_text_search", "messages", "text"),
    ("ix_chunks_transcript_search", "chunks", "transcript"),
)


def _sqlite_upgrade(fts: str, table: str, column: str) -> list[str]:
    # External content: the FTS table must be told the exact old text to remove an
    # entry, so updates and deletes pass `old.<column>`. Every row is indexed (a NULL
    # transcript indexes nothing), exactly as 'rebuild' reads them, so the triggers and
    # a rebuild always agree. Updates fire only when the text itself is set: messages
    # and chunks are updated often (delivery state, archive work) and rarely in text.
    remove = f"INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.id, old.{column});"
    add = f"INSERT INTO {fts}(rowid, {column}) VALUES (new.id, new.{column});"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({column}, content='{table}', "
        f"content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN {add} END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN {remove} END",
        f"CREATE TRIGGER {fts}_update AFTER UPDATE OF {column} ON {table} BEGIN {remove} {add} END",
        # The rows stored before this migration.
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for fts, table, column in _FTS:
            for statement in _sqlite_upgrade(fts, table, column):
                op.execute(statement)
        return
    for name, table, column in _GIN:
        # Built from the rows already there; queries must spell the expression the
        # same way (with the config as a literal) for Postgres to use the index.
        op.create_index(
            name,
            table,
            [sa.text(f"to_tsvector('simple', {column})")],
            postgresql_using="gin",
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for fts, _table, _column in _FTS:
            for trigger in ("insert", "delete", "update"):
                op.execute(f"DROP TRIGGER IF EXISTS {fts}_{trigger}")
            op.execute(f"DROP TABLE IF EXISTS {fts}")  # its shadow tables go with it
        return
    for name, table, _column in _GIN:
        op.drop_index(name, table_name=table)

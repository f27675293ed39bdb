"""Full-text search over one conversation: its messages and its verbatim transcripts.

The indexes are the database's own (migration 0008): SQLite FTS5 tables kept current
by triggers, Postgres GIN indexes over `to_tsvector('simple', ...)`. Nothing here
writes them, so every path that stores, edits or deletes a message or a chunk keeps
search current without knowing it exists.

Whatever a person or a model types is searched for as words, never as query syntax:
each whitespace-separated word must occur (as a phrase of its tokens, so "don't" and
"foo-bar" find themselves), or for `best(any_word=True)` any one of them, and nothing
typed reaches the database as an operator.

`Search.search` pages through every hit newest first (the REST API); `Search.best`
finds the most relevant hits by the index's own score (FTS5 bm25, Postgres
ts_rank_cd), however old, among the newest `RANKED` matches of each kind (the model's
recall).

Modules: `_hits` (words, what is searched, a hit), `_index` (the two databases'
indexes), `_search` (the paged search and the `Search` front), `_ranked` (the ranked one).
"""

from memory.storage.search._hits import (
    CHUNKS_FTS,
    ELLIPSIS,
    MARK_END,
    MARK_START,
    MAX_WORDS,
    MESSAGES_FTS,
    SEARCH_INDEXES,
    SNIPPET_TOKENS,
    HitKind,
    SearchHit,
    SearchPosition,
    is_search_object,
    search_words,
)
from memory.storage.search._ranked import COMMON_SAMPLE, RANKED, LeftOut, Ranked
from memory.storage.search._search import Search

__all__ = [
    "CHUNKS_FTS",
    "COMMON_SAMPLE",
    "ELLIPSIS",
    "MARK_END",
    "MARK_START",
    "MAX_WORDS",
    "MESSAGES_FTS",
    "RANKED",
    "SEARCH_INDEXES",
    "SNIPPET_TOKENS",
    "HitKind",
    "LeftOut",
    "Ranked",
    "Search",
    "SearchHit",
    "SearchPosition",
    "is_search_object",
    "search_words",
]

"""Full-text search over a conversation's messages and transcripts, on SQLite (FTS5) and
Postgres (tsvector): what it finds, what it never finds, what typed input cannot break,
paging, and that the index follows the rows — including rows older than the index."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import (
    Integer,
    String,
    Text,
    Uuid,
    column,
    delete,
    event,
    insert,
    table,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memory.provenance import NOT_DIALOGUE
from memory.storage.engine import create_engine, session_factory
from memory.storage.messages import NewMessage
from memory.storage.migrate import alembic_config, migrate
from memory.storage.models import Chunk, ChunkStatus, Message, Role, UTCDateTime
from memory.storage.repositories import Repositories
from memory.storage.search import (
    MARK_END,
    MARK_START,
    HitKind,
    SearchHit,
    SearchPosition,
    search_words,
)
from memory.token_count import message_tokens
from tests.support import databases

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def repos(sessions: async_sessionmaker[AsyncSession]) -> Repositories:
    return Repositories.open(sessions, count_tokens=message_tokens, now=lambda: T0)


async def _conversation(repos: Repositories, who: str = "ada") -> uuid.UUID:
    ref = await repos.identities.resolve_identity(
        "webchat", who, display_name=who, timezone="UTC", now=T0
    )
    return ref.conversation_id


async def _say(
    repos: Repositories, conversation_id: uuid.UUID, text_: str, at: datetime = T0
) -> int:
    stored, _ = await repos.messages.add_message(
        conversation_id, NewMessage(role=Role.USER, channel="webchat", text=text_), now=at
    )
    return stored.seq


async def _chunk(
    sessions: async_sessionmaker[AsyncSession],
    conversation_id: uuid.UUID,
    seqs: tuple[int, int],
    transcript: str | None,
    *,
    at: datetime = T0,
    level: int = 0,
) -> int:
    """A chunk over messages `seqs`; level 0 archives them (as the swap at a turn's
    start does)."""
    async with sessions() as session:
        chunk = Chunk(
            conversation_id=conversation_id,
            level=level,
            seq_start=seqs[0],
            seq_end=seqs[1],
            time_start=at,
            time_end=at + timedelta(minutes=5),
            transcript=transcript,
            summary="a summary",
            status=ChunkStatus.READY,
            created_at=at,
            updated_at=at,
        )
        session.add(chunk)
        await session.flush()
        if level == 0:
            await session.execute(
                update(Message)
                .where(Message.conversation_id == conversation_id, Message.seq.between(*seqs))
                .values(chunk_id=chunk.id)
            )
        await session.commit()
        return chunk.id


async def test_a_word_only_in_a_transcript_is_found_as_its_chunk(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ada = await _conversation(repos)
    first = await _say(repos, ada, "we planned the trip to the coast")
    last = await _say(repos, ada, "and booked the ferry", T0 + timedelta(minutes=1))
    # A transcript keeps what its messages no longer say alone (here: a header word).
    transcript = "[2026-03-01 12:00 · webchat · user Zephyrine]\nwe planned the trip\n"
    chunk_id = await _chunk(sessions, ada, (first, last), transcript)
    # A consolidated chunk has no transcript: it is never a hit.
    await _chunk(sessions, ada, (first, last), None, level=1)

    hits = await repos.search.search(ada, "zephyrine", limit=10)

    assert hits == [
        SearchHit(
            HitKind.CHUNK,
            T0,
            hits[0].snippet,
            hits[0].rank,
            chunk_id=chunk_id,
            level=0,
            seq_start=first,
            seq_end=last,
        )
    ]
    assert f"{MARK_START}Zephyrine{MARK_END}" in hits[0].snippet
    # The archived messages are still messages: found as such, and in their transcript.
    found = await repos.search.search(ada, "planned", limit=10)
    assert {(h.kind, h.seq, h.chunk_id) for h in found} == {
        (HitKind.MESSAGE, first, None),
        (HitKind.CHUNK, None, chunk_id),
    }


async def test_a_word_in_a_live_message_is_found_with_its_seq(repos: Repositories) -> None:
    ada = await _conversation(repos)
    await _say(repos, ada, "good morning")
    seq = await _say(repos, ada, "My Cat is called Ménélas, don't laugh", T0 + timedelta(hours=1))

    hits = await repos.search.search(ada, "ménélas CAT", limit=10)

    assert [(h.kind, h.seq, h.time) for h in hits] == [
        (HitKind.MESSAGE, seq, T0 + timedelta(hours=1))
    ]
    assert f"{MARK_START}Ménélas{MARK_END}" in hits[0].snippet
    assert f"{MARK_START}Cat{MARK_END}" in hits[0].snippet
    assert hits[0].chunk_id is None
    # Every word must be there; a word is searched as its tokens in a row.
    assert await repos.search.search(ada, "cat dog", limit=10) == []
    assert [h.seq for h in await repos.search.search(ada, "don't", limit=10)] == [seq]


async def test_another_conversations_words_are_not_found(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ada = await _conversation(repos, "ada")
    bob = await _conversation(repos, "bob")
    seq = await _say(repos, bob, "my secret is quokka")
    await _chunk(sessions, bob, (seq, seq), "[header]\nmy secret is quokka\n")
    await _say(repos, ada, "what is the secret?")

    assert await repos.search.search(ada, "quokka", limit=10) == []
    assert len(await repos.search.search(bob, "quokka", limit=10)) == 2
    assert await repos.search.search(uuid.uuid4(), "secret", limit=10) == []


def _noise(seed: int, length: int) -> str:
    pool = "abcXYZ019 \"'*()^:-+~.,;!?{}[]<>|&\\/ éüßж中文😀\u0301\u200b\t\n" + "NEAR OR AND NOT "
    rng = random.Random(seed)
    return "".join(rng.choice(pool) for _ in range(length))


HOSTILE = [
    "",
    "   ",
    '"',
    '""',
    "*",
    "hello*",
    "NEAR(",
    "NEAR(a b",
    "a OR",
    "OR",
    "AND NOT",
    "-hello",
    "'",
    "'; DROP TABLE messages; --",
    "col:hello",
    "hello:*",
    "^hello",
    "{text}: hello",
    "a & b | !c <-> (d)",
    "\\",
    "日本語のテキスト",
    "emoji 😀 only 😀",
    "\u0301\u0301",
    "zero\x00byte",
    "lone \ud800 surrogate",
    "x" * 3000,
    *(_noise(seed, 500) for seed in range(5)),
]


async def test_hostile_queries_never_raise(repos: Repositories) -> None:
    ada = await _conversation(repos)
    seq = await _say(repos, ada, 'hello "world" NEAR(a b) OR x*y 日本語のテキスト zero')

    for query in HOSTILE:
        hits = await repos.search.search(ada, query, limit=5)
        assert isinstance(hits, list), query
        assert all(h.seq == seq for h in hits), query
    # Typed syntax is only words: the words around it are still found.
    for query in ('hello "', "NEAR( hello", "hello OR", "'hello'", "*hello*", "\x00zero\x00"):
        assert [h.seq for h in await repos.search.search(ada, query, limit=5)] == [seq], query
    assert await repos.search.search(ada, "", limit=5) == []


def test_only_words_with_a_letter_or_digit_are_searched() -> None:
    assert search_words(' " * NEAR( a OR ') == ["NEAR(", "a", "OR"]
    assert search_words("a\x00b \ud800") == ["a", "b"]
    assert search_words("") == []
    assert len(search_words("w " * 100)) == 32


async def test_pages_hold_every_hit_exactly_once(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ada = await _conversation(repos)
    seqs = []
    for n in range(23):
        # Runs of equal times: the order must not depend on time alone.
        seqs.append(await _say(repos, ada, f"ping number {n}", T0 + timedelta(minutes=n // 4)))
        await _say(repos, ada, "nothing here", T0 + timedelta(minutes=n // 4))
    chunks = [
        await _chunk(sessions, ada, (seqs[0], seqs[3]), "ping ping", at=T0),
        await _chunk(sessions, ada, (seqs[4], seqs[7]), "ping", at=T0 + timedelta(minutes=1)),
    ]

    everything = await repos.search.search(ada, "ping", limit=1000)
    paged: list[SearchHit] = []
    after: SearchPosition | None = None
    while page := await repos.search.search(ada, "ping", limit=4, after=after):
        assert len(page) <= 4
        paged.extend(page)
        # Through a token, as a client would carry it.
        after = SearchPosition.from_token(page[-1].position.token())

    keys = [(h.kind, h.seq, h.chunk_id) for h in paged]
    assert keys == [(h.kind, h.seq, h.chunk_id) for h in everything]
    assert len(set(keys)) == len(keys) == len(seqs) + len(chunks)
    assert [h.time for h in paged] == sorted((h.time for h in paged), reverse=True)


async def test_time_bounds_hold_messages_and_overlapping_chunks(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ada = await _conversation(repos)
    early = await _say(repos, ada, "kiwi early", T0)
    late = await _say(repos, ada, "kiwi late", T0 + timedelta(days=2))
    chunk_id = await _chunk(sessions, ada, (early, early), "kiwi in the chunk", at=T0)

    def keys(hits: list[SearchHit]) -> set[tuple[HitKind, int | None]]:
        return {(h.kind, h.seq or h.chunk_id) for h in hits}

    search = repos.search.search
    assert keys(await search(ada, "kiwi", limit=10, start=T0 + timedelta(days=1))) == {
        (HitKind.MESSAGE, late)
    }
    assert keys(await search(ada, "kiwi", limit=10, end=T0 + timedelta(days=1))) == {
        (HitKind.MESSAGE, early),
        (HitKind.CHUNK, chunk_id),
    }
    # The chunk runs from T0 to T0 + 5 minutes: a window inside it finds it.
    inside = await search(
        ada, "kiwi", limit=10, start=T0 + timedelta(minutes=1), end=T0 + timedelta(minutes=2)
    )
    assert keys(inside) == {(HitKind.CHUNK, chunk_id)}


async def _index_bytes(sessions: async_sessionmaker[AsyncSession]) -> bytes:
    async with sessions() as session:
        blobs = await session.scalars(
            text("SELECT block FROM messages_fts_data UNION ALL SELECT block FROM chunks_fts_data")
        )
        return b"".join(blob for blob in blobs if blob)


async def _check_index(sessions: async_sessionmaker[AsyncSession]) -> None:
    """SQLite checks its FTS5 index against the rows (raising if they differ)."""
    async with sessions() as session:
        for fts in ("messages_fts", "chunks_fts"):
            await session.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')"))


async def test_the_index_follows_edits_and_erasure(
    repos: Repositories, sessions: async_sessionmaker[AsyncSession], database_url: str
) -> None:
    ada = await _conversation(repos)
    seq = await _say(repos, ada, "the password is xylophonic")
    chunk_id = await _chunk(sessions, ada, (seq, seq), "[header]\nthe password is xylophonic\n")
    await _say(repos, ada, "unrelated")
    sqlite = database_url.startswith("sqlite")
    if sqlite:
        assert b"xylophonic" in await _index_bytes(sessions)

    async with sessions() as session:
        await session.execute(
            update(Message)
            .where(Message.conversation_id == ada, Message.seq == seq)
            .values(text="the password is gone")
        )
        await session.commit()
    assert [h.kind for h in await repos.search.search(ada, "xylophonic", limit=10)] == [
        HitKind.CHUNK
    ]
    assert [h.seq for h in await repos.search.search(ada, "gone", limit=10)] == [seq]
    if sqlite:
        await _check_index(sessions)

    async with sessions() as session:
        await session.execute(delete(Message).where(Message.conversation_id == ada))
        await session.execute(delete(Chunk).where(Chunk.id == chunk_id))
        await session.commit()
    assert await repos.search.search(ada, "xylophonic", limit=10) == []
    assert await repos.search.search(ada, "unrelated", limit=10) == []

    await repos.search.compact()
    if sqlite:  # merged: the erased words are gone from the file, not just marked
        assert b"xylophonic" not in await _index_bytes(sessions)
        await _check_index(sessions)
    # Search still works after compacting, for what is stored next.
    seq = await _say(repos, ada, "xylophonic again")
    assert [h.seq for h in await repos.search.search(ada, "xylophonic", limit=10)] == [seq]


# -- rows stored before the index existed ------------------------------------------------

_USERS = table(
    "users",
    column("id", Uuid),
    column("display_name", String),
    column("timezone", String),
    column("created_at", UTCDateTime),
)
_CONVERSATIONS = table(
    "conversations",
    column("id", Uuid),
    column("kind", String),
    column("user_id", Uuid),
    column("title", String),
    column("created_at", UTCDateTime),
    column("last_seq", Integer),
    column("last_user_seq", Integer),
    column("answered_seq", Integer),
)
_MESSAGES = table(
    "messages",
    column("conversation_id", Uuid),
    column("seq", Integer),
    column("role", String),
    column("channel", String),
    column("author_name", String),
    column("text", Text),
    column("created_at", UTCDateTime),
    column("token_count", Integer),
    column("delivery_attempts", Integer),
)
_CHUNKS = table(
    "chunks",
    column("conversation_id", Uuid),
    column("level", Integer),
    column("seq_start", Integer),
    column("seq_end", Integer),
    column("time_start", UTCDateTime),
    column("time_end", UTCDateTime),
    column("transcript", Text),
    column("status", String),
    column("attempts", Integer),
    column("created_at", UTCDateTime),
    column("updated_at", UTCDateTime),
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema yet, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'blank.db'}"
        return
    with databases.empty_postgres_database() as url:
        yield url


def _upgrade_to(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _old_rows(connection: Connection) -> uuid.UUID:
    """A conversation with a message and a transcript, written as the schema before
    search (revision 0007) has them: no model involved, so later columns don't matter."""
    user_id, conversation_id = uuid.uuid4(), uuid.uuid4()
    connection.execute(
        insert(_USERS).values(id=user_id, display_name="Ada", timezone="UTC", created_at=T0)
    )
    connection.execute(
        insert(_CONVERSATIONS).values(
            id=conversation_id,
            kind="personal",
            user_id=user_id,
            title="Ada",
            created_at=T0,
            last_seq=2,
            last_user_seq=2,
            answered_seq=0,
        )
    )
    for seq, words in ((1, "an old message about marmalade"), (2, "and one about toast")):
        connection.execute(
            insert(_MESSAGES).values(
                conversation_id=conversation_id,
                seq=seq,
                role="user",
                channel="webchat",
                author_name="Ada",
                text=words,
                created_at=T0,
                token_count=5,
                delivery_attempts=0,
            )
        )
    connection.execute(
        insert(_CHUNKS).values(
            conversation_id=conversation_id,
            level=0,
            seq_start=1,
            seq_end=2,
            time_start=T0,
            time_end=T0,
            transcript="[old header · quince]\nan old message about marmalade\n",
            status="ready",
            attempts=0,
            created_at=T0,
            updated_at=T0,
        )
    )
    return conversation_id


async def test_rows_stored_before_the_index_existed_are_found(blank_database_url: str) -> None:
    engine = create_engine(blank_database_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_upgrade_to, "0007")
            ada = await connection.run_sync(_old_rows)
        await migrate(engine)
        repos = Repositories.open(
            session_factory(engine), count_tokens=message_tokens, now=lambda: T0
        )

        marmalade = await repos.search.search(ada, "marmalade", limit=10)
        assert {(h.kind, h.seq) for h in marmalade} == {(HitKind.MESSAGE, 1), (HitKind.CHUNK, None)}
        assert [h.kind for h in await repos.search.search(ada, "quince", limit=10)] == [
            HitKind.CHUNK
        ]
        # And the rows stored after it, through the same index.
        seq = await _say(repos, ada, "fresh marmalade", T0 + timedelta(days=1))
        assert (await repos.search.search(ada, "marmalade", limit=1))[0].seq == seq
    finally:
        await engine.dispose()


# A Postgres plan: FTS5 reads its own index whatever the query.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_on_postgres_a_transcript_is_matched_by_its_index_never_read_whole(
    database_url: str, repos: Repositories, sessions: async_sessionmaker[AsyncSession]
) -> None:
    ada = await _conversation(repos)
    seqs = [await _say(repos, ada, f"we planned the trip, day {n}") for n in range(6)]
    for first, last in zip(seqs[::2], seqs[1::2], strict=True):
        transcript = f"[2026-03-01 12:00 · webchat · user Ada]\nwe planned the trip {first}\n"
        await _chunk(sessions, ada, (first, last), transcript)
    engine = sessions.kw["bind"]
    sent: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", keep)
    try:
        await repos.search.search(ada, "planned trip", limit=10)
        await repos.search.best(ada, "planned trip", limit=5, left_out=NOT_DIALOGUE)
        await repos.search.best(ada, "qxnever trip", limit=5, any_word=True)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", keep)
    # The searches' own statements again, in one transaction as they were sent (the
    # settings they make included), each SELECT explained.
    plans: list[str] = []
    message_plans: list[str] = []
    async with sessions() as session:
        connection = await session.connection()
        for statement, parameters in sent:
            if statement.lstrip().upper().startswith("SET"):
                await connection.exec_driver_sql(statement, parameters)
            elif "@@" in statement:
                explained = await connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
                plan = "\n".join(row[0] for row in explained)
                (plans if "transcript" in statement else message_plans).append(plan)

        indexed = await connection.exec_driver_sql(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_messages_text_search'"
        )
        [definition] = [row[0] for row in indexed]
    # A message's words (its text and files line) are matched by the index's own
    # expression, so the index serves them where the planner wants it (a conversation's
    # few messages are read by their conversation's index instead).
    expression = definition.split("USING gin (", 1)[1].rsplit(")", 1)[0]
    assert "COALESCE(media" in expression
    assert message_plans
    unqualified = [re.sub(r"\bmessages(_\d+)*\.", "", plan) for plan in message_plans]
    matched = [plan for plan in unqualified if "@@" in plan]
    assert matched, message_plans
    assert all(expression in plan for plan in matched), (expression, matched)
    assert len(plans) >= 3
    for plan in plans:
        assert "ix_chunks_transcript_search" in plan, plan
        # A transcript's vector is never computed to test a match: only to score one.
        assert not re.search(r"Filter: .*transcript\) @@", plan), plan

"""Export and import: export → erase → import gives back every message, chunk,
transcript and profile line byte for byte at the same seqs; importing again (or into
the database it came from) duplicates nothing; a newer or broken file is refused with
its line; `parley export` and `parley import` do the same from the command line."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from gateway.text import clean
from memory.portable.export import Exports
from memory.portable.format import VERSION, ExportFormatError
from memory.portable.imports import ImportConflict, ImportCounts, Imports, Tally
from memory.portable.rows import NOT_DELIVERED
from memory.storage.engine import create_engine, session_factory
from memory.storage.models import (
    Chunk,
    Conversation,
    Delivery,
    Identity,
    Message,
    Profile,
    RetiredFact,
    Schedule,
    ScheduleFire,
)
from memory.storage.repositories import Repositories
from memory.token_count import message_tokens
from tests.support.process import parley_env, run_parley
from tests.support.world import MARKER, T0, World, dump, files_with


async def export(world: World, user_id: uuid.UUID, page_size: int = 500) -> list[str]:
    exports = Exports(world.sessions, page_size=page_size)
    return [line async for line in exports.export_user(user_id, now=T0)]


def importer(sessions: async_sessionmaker[AsyncSession], data_dir: Path) -> Imports:
    return Imports(sessions, clean=clean, archive_dir=data_dir / "archive")


async def person(world: World, user_id: uuid.UUID) -> dict[str, Any]:
    """Everything of a person that an export carries, with no database id in it."""
    async with world.sessions() as session:
        conversation = await session.scalar(
            select(Conversation.id).where(Conversation.user_id == user_id)
        )
        chunks = list(
            await session.scalars(
                select(Chunk)
                .where(Chunk.conversation_id == conversation)
                .order_by(Chunk.level, Chunk.seq_start)
            )
        )
        key = {c.id: (c.level, c.seq_start) for c in chunks}
        profile = await session.get(Profile, user_id)
        retired = await session.scalars(
            select(RetiredFact).where(RetiredFact.user_id == user_id).order_by(RetiredFact.id)
        )
        identities = await session.execute(
            select(Identity.channel, Identity.external_id, Identity.display_name)
            .where(Identity.user_id == user_id)
            .order_by(Identity.channel)
        )
        return {
            "identities": list(identities),
            "messages": await _messages(session, conversation, key),
            "chunks": [_chunk(c, key) for c in chunks],
            "profile": None if profile is None else profile.text,
            "evidence": None if profile is None else _keyed(profile.evidence, key),
            "retired": [(r.text, r.reason, r.retired_at, _keyed(r.evidence, key)) for r in retired],
            "files": _transcript_files(world.archive_dir / str(conversation)),
            "schedules": await _schedules(session, conversation),
        }


async def _schedules(session: AsyncSession, conversation: uuid.UUID | None) -> list[Any]:
    schedules = await session.scalars(
        select(Schedule).where(Schedule.conversation_id == conversation).order_by(Schedule.id)
    )
    found = []
    for s in schedules:
        fires = await session.scalars(
            select(ScheduleFire)
            .where(ScheduleFire.schedule_id == s.id)
            .order_by(ScheduleFire.due_at)
        )
        found.append(
            (
                s.kind, s.text, s.starts_local, s.zone, s.repeat, s.channel, s.created_by,
                s.created_at, s.state, s.next_local, s.next_due_at,
                [(f.due_at, f.fired_at, f.outcome, f.missed, f.detail) for f in fires],
            )
        )  # fmt: skip
    return found


def _chunk(c: Chunk, key: dict[int, tuple[int, int]]) -> tuple[Any, ...]:
    return (
        c.level, c.seq_start, c.seq_end, c.time_start, c.time_end, c.status, c.summary,
        c.transcript, c.in_timeline, c.facts_extracted, key.get(c.parent_id or 0),
    )  # fmt: skip


async def _messages(
    session: AsyncSession, conversation: uuid.UUID | None, key: dict[int, tuple[int, int]]
) -> list[tuple[Any, ...]]:
    author = aliased(Identity)
    rows = await session.execute(
        select(Message, author.channel, author.external_id)
        .outerjoin(author, author.id == Message.identity_id)
        .where(Message.conversation_id == conversation)
        .order_by(Message.seq)
    )
    return [
        (m.seq, m.role, m.channel, m.text, m.created_at, m.platform_ts, m.source,
         m.author_name, m.platform_message_id, m.reply_to_seq, m.token_count,
         key.get(m.chunk_id or 0), channel, external_id)
        for m, channel, external_id in rows
    ]  # fmt: skip


def _keyed(evidence: str | None, chunk_key: dict[int, tuple[int, int]]) -> Any:
    def rekey(value: Any) -> Any:
        if isinstance(value, list):
            return [rekey(v) for v in value]
        if isinstance(value, dict):
            return value | {"chunk": chunk_key.get(value["chunk"])}
        return value

    return None if evidence is None else rekey(json.loads(evidence))


def _transcript_files(directory: Path) -> list[tuple[str, str]]:
    """(date, text) of each transcript file: names hold chunk ids, which are this
    database's own."""
    return sorted((p.name.split("-chunk-")[0], p.read_text()) for p in directory.glob("*.txt"))


async def test_export_erase_import_gives_everything_back_byte_for_byte(world: World) -> None:
    ana = world.ana
    before = await person(world, ana.user_id)
    lines = await export(world, ana.user_id)
    header = json.loads(lines[0])

    await world.repos.erasure.erase_user(ana.user_id)
    counts = await importer(world.sessions, world.archive_dir.parent).import_lines(lines, now=T0)

    assert header["format"] == "parley-export"
    assert header["version"] == VERSION
    assert counts.user_created
    assert counts.conflicts == 0
    assert counts.messages == Tally(created=header["counts"]["messages"], skipped=0)
    assert counts.chunks.created == header["counts"]["chunks"] > 5
    assert counts.transcript_files == header["counts"]["transcripts"] > 0
    assert (counts.identities.created, counts.profile_lines.created) == (2, 2)
    assert counts.retired_facts.created == 1
    assert counts.schedules.created == header["counts"]["schedules"] == 2
    after = await person(world, counts.user_id)
    assert after == before
    assert len(before["messages"]) == 48
    assert before["files"]
    # The reply that was never delivered is not sent now, long after.
    async with world.sessions() as session:
        unsent = await session.scalar(
            select(Message.delivery_error).where(
                Message.delivery == Delivery.FAILED, Message.text == "re 47"
            )
        )
    assert unsent == NOT_DELIVERED


async def test_importing_again_or_where_it_came_from_duplicates_nothing(
    world: World, tmp_path: Path
) -> None:
    ana = world.ana
    lines = await export(world, ana.user_id)
    everything = await dump(world.engine)

    here = await importer(world.sessions, world.archive_dir.parent).import_lines(
        iter(lines), now=T0
    )

    assert here.user_id == ana.user_id
    assert not here.user_created
    assert _created(here) == 0
    assert here.conflicts == 0
    assert await dump(world.engine) == everything
    await world.repos.erasure.erase_user(ana.user_id)
    first = await importer(world.sessions, world.archive_dir.parent).import_lines(lines, now=T0)
    restored = await dump(world.engine)
    files = sorted(p for p in world.archive_dir.rglob("*") if p.is_file())
    second = await importer(world.sessions, world.archive_dir.parent).import_lines(lines, now=T0)
    assert first.user_id == second.user_id
    assert _created(first) > 0
    assert _created(second) == 0
    assert second.conflicts == 0
    assert second.messages.skipped == first.messages.created
    assert await dump(world.engine) == restored
    assert sorted(p for p in world.archive_dir.rglob("*") if p.is_file()) == files


def _created(counts: ImportCounts) -> int:
    tallies = (counts.identities, counts.chunks, counts.messages, counts.profile_lines)
    others = (counts.retired_facts, counts.schedules)
    return sum(t.created for t in (*tallies, *others)) + counts.transcript_files


async def test_an_export_reads_the_same_a_page_at_a_time(world: World) -> None:
    assert await export(world, world.ana.user_id, page_size=3) == await export(
        world, world.ana.user_id
    )


USER: dict[str, Any] = {"id": "x", "display_name": "Zed", "timezone": "UTC", "created_at": "2026-03-01T09:00:00+00:00"}  # fmt: skip
HEADER: dict[str, Any] = {
    "format": "parley-export", "version": 1, "exported_at": "2026-03-01T09:00:00+00:00",
    "user": USER, "counts": {},
}  # fmt: skip
IDENTITY: dict[str, Any] = {"type": "identity", "channel": "webchat", "external_id": "zed", "created_at": "2026-03-01T09:00:00+00:00"}  # fmt: skip
CONVERSATION: dict[str, Any] = {"type": "conversation", "kind": "personal", "created_at": "2026-03-01T09:00:00+00:00"}  # fmt: skip
MESSAGE: dict[str, Any] = {
    "type": "message", "seq": 1, "role": "user", "channel": "webchat", "author": ["webchat", "zed"],
    "text": "hello", "created_at": "2026-03-01T09:00:00+00:00",
}  # fmt: skip


def _stream(*records: dict[str, Any] | str) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in records]


@pytest.mark.parametrize(
    ("lines", "line", "problem"),
    [
        (_stream(HEADER | {"version": 2}, IDENTITY), 1, "version 2 is newer"),
        (_stream(IDENTITY), 1, "not a parley-export header"),
        ([], 1, "no header"),
        (_stream(HEADER, IDENTITY, "{not json"), 3, "not a JSON object"),
        (_stream(HEADER, "", IDENTITY, "[1, 2]"), 4, "not a JSON object"),
        (_stream(HEADER, {"type": "spaceship"}), 2, "unknown record type"),
        (_stream(HEADER, IDENTITY, MESSAGE), 3, "before the conversation"),
        (_stream(HEADER, CONVERSATION, MESSAGE, IDENTITY), 4, "identity record after message"),
        (_stream(HEADER, CONVERSATION, MESSAGE | {"seq": "1"}), 3, "'seq' must be a whole number"),
        (_stream(HEADER, CONVERSATION, MESSAGE | {"created_at": "2026-03-01T09:00"}), 3, "no UTC offset"),
        (_stream(HEADER, CONVERSATION, MESSAGE | {"role": "god"}), 3, "'role' must be one of"),
        (_stream(HEADER, IDENTITY | {"external_id": "z" * 201}), 2, "longer than 200"),
        (_stream(HEADER | {"user": USER | {"timezone": "Mars/Base"}}), 1, "unknown time zone"),
    ],
)  # fmt: skip
async def test_a_newer_or_broken_file_is_refused_naming_the_line(
    database_url: str, tmp_path: Path, lines: list[str], line: int, problem: str
) -> None:
    engine = create_engine(database_url)
    try:
        with pytest.raises(ExportFormatError) as refused:
            await importer(session_factory(engine), tmp_path).import_lines(lines, now=T0)
    finally:
        await engine.dispose()
    assert isinstance(refused.value, ValueError)
    assert refused.value.line == line
    assert str(refused.value).startswith(f"line {line}: ")
    assert problem in str(refused.value)


async def test_imported_text_is_made_storable(database_url: str, tmp_path: Path) -> None:
    dirty = json.dumps(MESSAGE | {"text": "a\u0000b \ud800 c"})
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    repos = Repositories.open(sessions, count_tokens=message_tokens, now=lambda: T0)
    try:
        lines = _stream(HEADER | {"user": USER | {"display_name": "Z\u0000ed"}}, IDENTITY, CONVERSATION, dirty)  # fmt: skip
        counts = await importer(sessions, tmp_path).import_lines(lines, now=T0)
        ref = await repos.identities.resolve_identity(
            "webchat", "zed", display_name="", timezone="UTC", now=T0
        )
        (message,) = await repos.messages.messages_after(ref.conversation_id, 0, 10)
    finally:
        await engine.dispose()
    assert counts.messages == Tally(created=1)
    assert counts.user_created
    assert message.text == "ab \ufffd c"


# -- the command line ------------------------------------------------------------------------


async def test_parley_export_and_import_round_trip_through_a_file(
    world: World, database_url: str, tmp_path: Path
) -> None:
    ana = world.ana
    before = await person(world, ana.user_id)
    env = parley_env(data_dir=str(tmp_path), database_url=database_url)
    exported = await asyncio.to_thread(
        run_parley, "export", str(ana.user_id), env=env, cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    file = tmp_path / "ana.ndjson"
    file.write_text(exported.stdout)
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert records[0]["format"] == "parley-export"  # stdout is the stream, nothing else
    assert sum(r.get("type") == "message" for r in records) == 48
    assert "exporting" in exported.stderr  # the progress bar's label

    await world.repos.erasure.erase_user(ana.user_id)
    assert files_with(world.archive_dir, MARKER) == []
    imported = await asyncio.to_thread(run_parley, "import", str(file), env=env, cwd=tmp_path)
    again = await asyncio.to_thread(run_parley, "import", str(file), env=env, cwd=tmp_path)
    missing = await asyncio.to_thread(
        run_parley, "export", str(uuid.uuid4()), env=env, cwd=tmp_path
    )

    assert imported.returncode == 0, imported.stderr
    assert "messages: 48 created, 0 already here" in imported.stdout
    assert again.returncode == 0
    assert "messages: 0 created, 48 already here" in again.stdout
    user_id = uuid.UUID(imported.stdout.split()[3])
    assert await person(world, user_id) == before
    assert missing.returncode == 2
    assert "no person" in missing.stderr
    assert missing.stdout == ""


async def test_an_import_never_mixes_two_histories(world: World) -> None:
    ana = world.ana
    lines = await export(world, ana.user_id)
    await world.repos.erasure.erase_user(ana.user_id)
    # Ana writes again before the import: a new person, with a new history.
    again = await world.repos.identities.resolve_identity(
        "telegram", "100", display_name="Ana", timezone="UTC", now=T0
    )
    await world.say(again.conversation_id, again.identity_id, "telegram", "hello again")
    everything = await dump(world.engine)

    with pytest.raises(ImportConflict, match="another conversation"):
        await importer(world.sessions, world.archive_dir.parent).import_lines(lines, now=T0)

    assert await dump(world.engine) == everything  # nothing was written

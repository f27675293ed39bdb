"""Erasing a person and deleting a conversation: every row and transcript file goes,
counted exactly; their words leave the SQLite file (free pages and WAL included);
groups keep everything that was not theirs; queued jobs find nothing and return."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import aliased

from memory.archive.transcript import transcript_path, write_transcript
from memory.profile.profiles import Profiles
from memory.profile.upkeep import ProfileJobs, ProfileLimits
from memory.storage.erasure import DeletedCounts, ErasedCounts
from memory.storage.identities import IdentityRef
from memory.storage.messages import ConversationGone, NewMessage
from memory.storage.models import (
    Chunk,
    ChunkStatus,
    Conversation,
    Delivery,
    Message,
    Role,
    SentPart,
)
from tests.support.world import (
    GROUP_ID,
    MARKER,
    OTHER,
    T0,
    World,
    dump,
    files_with,
    mentions,
    nothing,
    scalar,
)


async def test_erasing_a_person_leaves_no_row_no_file_and_no_byte_of_theirs(
    world: World, tmp_path: Path
) -> None:
    ana = world.ana
    ana_ids = {
        str(v) for v in (ana.user_id, ana.identity_id, world.ana_discord, ana.conversation_id)
    }
    ana_ids |= {uuid.UUID(v).hex for v in ana_ids}
    before = await dump(world.engine)
    expected = await _expected(world)
    assert files_with(tmp_path, MARKER), "the scan must see the marker before"

    erased = await world.repos.erasure.erase_user(ana.user_id)

    assert erased == expected
    after = await dump(world.engine)
    for table, rows in after.items():
        for row in rows:
            assert not any(mentions(v, ana_ids | {MARKER}) for v in row.values()), (table, row)
    if world.engine.dialect.name == "sqlite":  # every file: the database, -wal, -shm too
        assert files_with(tmp_path, MARKER) == []
    assert not list(world.archive_dir.glob(f"{ana.conversation_id}*"))
    _bo_untouched(world, before, after)
    assert await world.repos.erasure.erase_user(ana.user_id) is None


async def _expected(world: World) -> ErasedCounts:
    """What erasing Ana must report, counted plainly from the rows."""
    ana = world.ana
    own = Message.conversation_id == ana.conversation_id
    typed = (
        (Message.conversation_id == world.group)
        & Message.identity_id.in_([ana.identity_id])
        & (Message.role == Role.USER)
    )
    first = await scalar(world, select(func.min(Message.seq)).where(typed))
    theirs = aliased(Message)
    their_seqs = select(theirs.seq).where(
        theirs.conversation_id == world.group,
        theirs.identity_id == ana.identity_id,
        theirs.role == Role.USER,
    )
    unsent = (
        (Message.conversation_id == world.group)
        & (Message.delivery == Delivery.PENDING)
        & Message.reply_to_seq.in_(their_seqs)
    )
    chunks = (Chunk.conversation_id == ana.conversation_id) | (
        (Chunk.conversation_id == world.group) & (Chunk.seq_end >= first)
    )
    waiting = (Chunk.status != ChunkStatus.READY) | (
        (Chunk.level == 0) & Chunk.facts_extracted.is_(False)
    )
    undelivered = Message.delivery.in_([Delivery.PENDING, Delivery.FAILED])
    count = select(func.count())
    sent_parts = select(func.count()).select_from(SentPart).join(Message)
    transcripts = await scalar(world, count.where(chunks, Chunk.transcript.is_not(None)))
    return ErasedCounts(
        messages=await scalar(world, count.where(own | typed | unsent)),
        chunks=await scalar(world, count.select_from(Chunk).where(chunks)),
        transcripts=transcripts,
        transcript_files=transcripts,  # one file per transcript, and nothing else
        jobs=await scalar(world, count.select_from(Chunk).where(chunks, waiting)),
        deliveries=await scalar(world, count.where(own | unsent, undelivered))
        + await scalar(world, sent_parts.where(own | typed | unsent)),
        identities=2,
        profile_lines=2,
        retired_facts=1,
    )


def _bo_untouched(
    world: World, before: dict[str, list[dict[str, Any]]], after: dict[str, list[dict[str, Any]]]
) -> None:
    bo = world.bo
    keys = {bo.user_id, bo.identity_id, bo.conversation_id}

    def bos(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # A message's chunk may be gone (the group's archive is cut back): the rest stays.
        kept = [
            {k: v for k, v in r.items() if k != "chunk_id"}
            for r in rows
            if keys & set(r.values()) or mentions(r.get("text"), {OTHER})
        ]
        return sorted(kept, key=str)

    for table in (
        "users",
        "identities",
        "conversations",
        "messages",
        "profiles",
        "pairing_requests",
        "link_codes",
    ):
        assert bos(after[table]) == bos(before[table]), table
    assert [w for w in after["watermarks"] if w["place"] != "dm-ana"] == [
        w for w in before["watermarks"] if w["place"] != "dm-ana"
    ]


async def test_a_group_keeps_what_was_not_theirs_and_archives_again(world: World) -> None:
    ana, group = world.ana, world.group
    first = await scalar(
        world,
        select(func.min(Message.seq)).where(
            Message.conversation_id == group, Message.identity_id == ana.identity_id
        ),
    )
    before = await world.repos.messages.messages_after(group, 0, 1_000)

    await world.repos.erasure.erase_user(ana.user_id)

    after = await world.repos.messages.messages_after(group, 0, 1_000)
    theirs = {m.seq for m in before if m.role is Role.USER and m.identity_id == ana.identity_id}
    unsent = {m.seq for m in before if m.delivery is Delivery.PENDING and m.reply_to_seq in theirs}
    assert theirs
    assert unsent
    assert [(m.seq, m.text) for m in after] == [
        (m.seq, m.text) for m in before if m.seq not in theirs | unsent
    ]
    notice = next(m for m in after if m.source == "operator via REST")
    assert notice.identity_id is None  # kept; its addressee is gone
    chunks = await world.archive.chunks(group)
    assert chunks
    assert all(c.seq_end < first for c in chunks)
    async with world.sessions() as session:
        live = set(
            await session.scalars(
                select(Message.seq).where(
                    Message.conversation_id == group, Message.chunk_id.is_(None)
                )
            )
        )
    assert {m.seq for m in after if m.seq > first} <= live
    assert not await world.repos.conversations.owes_reply(group)
    # The archiver takes it up again from there; nothing of Ana comes back.
    await world.archive_all(group)
    again = await world.archive.chunks(group)
    assert len(again) > len(chunks)
    assert not files_with(world.archive_dir, MARKER)


async def _small_conversation(world: World) -> IdentityRef:
    """Cy's conversation, with what a delete must count: 10 messages; 2 replies not
    delivered (one pending, one failed) and 3 parts sent; 4 chunks, 3 with a transcript
    and a file each, 2 waiting for work (one to summarise, one to take facts from)."""
    cy = await world.repos.identities.resolve_identity(
        "telegram", "555", display_name="Cy", timezone="UTC", now=T0
    )
    conversation = cy.conversation_id
    for n, reply in enumerate([Delivery.SENT] * 3 + [Delivery.FAILED, Delivery.PENDING]):
        await world.say(conversation, cy.identity_id, "telegram", f"cy {n}", reply=reply)
    ready, pending = ChunkStatus.READY, ChunkStatus.PENDING
    chunks = [
        Chunk(level=0, seq_start=1, seq_end=4, transcript="a", status=ready, facts_extracted=True),
        Chunk(level=0, seq_start=5, seq_end=8, transcript="b", status=ready),
        Chunk(level=0, seq_start=9, seq_end=10, transcript="c", status=pending),
        Chunk(level=1, seq_start=1, seq_end=8, summary="ab", status=ready),
    ]
    async with world.sessions() as session:
        for chunk in chunks:
            chunk.conversation_id, chunk.time_start, chunk.time_end = conversation, T0, T0
        session.add_all(chunks)
        await session.flush()
        first, second, _, parent = (chunk.id for chunk in chunks)
        children = Chunk.id.in_([first, second])
        await session.execute(update(Chunk).where(children).values(parent_id=parent))
        archived = (Message.conversation_id == conversation) & (Message.seq <= 8)
        await session.execute(update(Message).where(archived).values(chunk_id=first))
        await session.commit()
    for chunk in chunks[:3]:
        path = transcript_path(world.archive_dir, conversation, chunk.id, T0)
        write_transcript(path, chunk.transcript or "")
    return cy


async def test_deleting_a_conversation_counts_exactly_and_the_person_starts_afresh(
    world: World,
) -> None:
    cy = await _small_conversation(world)
    conversation = cy.conversation_id

    deleted = await world.repos.erasure.delete_conversation(conversation, now=T0)

    assert deleted == DeletedCounts(
        messages=10, chunks=4, transcripts=3, transcript_files=3, jobs=2, deliveries=5
    )
    assert not (world.archive_dir / str(conversation)).exists()
    assert await world.repos.erasure.delete_conversation(conversation, now=T0) is None
    # A turn that was running stores nothing more there.
    with pytest.raises(ConversationGone):
        await world.repos.messages.add_message(
            conversation, NewMessage(Role.ASSISTANT, "telegram", "late"), now=T0
        )
    with pytest.raises(ConversationGone):  # nor anything that came in for it
        await world.repos.messages.add_message(
            conversation,
            NewMessage(Role.USER, "telegram", "late too", platform_message_id="9001"),
            now=T0,
        )
    # The person stays, with an empty conversation of their own.
    again = await world.repos.identities.resolve_identity(
        "telegram", "555", display_name="Cy", timezone="UTC", now=T0
    )
    assert again.user_id == cy.user_id
    assert again.conversation_id != conversation
    assert await world.repos.messages.messages_after(again.conversation_id, 0, 10) == []
    # Nobody else's rows went.
    assert (
        await scalar(
            world, select(func.count()).where(Message.conversation_id == world.bo.conversation_id)
        )
        == 12
    )


async def test_deleting_a_group_conversation_forgets_its_chat(world: World) -> None:
    await world.repos.watermarks.advance("telegram", GROUP_ID, 5, private=False, now=T0)

    deleted = await world.repos.erasure.delete_conversation(world.group, now=T0)

    assert deleted is not None
    assert deleted.messages == 33
    assert await world.repos.watermarks.recent("telegram", since=T0 - timedelta(days=1)) == []
    assert await world.repos.conversations.get_conversation(world.group) is None
    assert await scalar(world, select(func.count()).select_from(Conversation)) == 2


async def test_queued_jobs_find_nothing_after_an_erasure_and_return(world: World) -> None:
    ana = world.ana
    chunk_ids = [c.id for c in await world.archive.chunks(ana.conversation_id)]

    await world.repos.erasure.erase_user(ana.user_id)

    class Model:
        async def complete(self, system: str, prompt: str, max_tokens: int) -> str:
            raise AssertionError("no job should get as far as the model")

    profile_jobs = ProfileJobs(
        profiles=Profiles(world.sessions),
        archive=world.archive,
        messages=world.repos.messages,
        conversations=world.repos.conversations,
        model=Model(),
        enqueue=nothing,
        now=lambda: T0,
        limits=ProfileLimits(tidy_at_chars=1),
    )
    for chunk_id in chunk_ids:
        await world.jobs.summarize(chunk_id)
        await profile_jobs.extract(chunk_id)
    await world.jobs.rollup(ana.conversation_id)
    await profile_jobs.tidy(ana.user_id)
    assert await world.jobs.sweep() == 0  # and the sweep finds none of it as work

"""A world of people to erase and export: two people over a personal conversation
each and a shared group, with an archive, profiles, retired facts and deliveries."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.replicas.lease_keeper import keep
from memory.archive.archive import Archive
from memory.archive.numbers import MemoryLimits
from memory.archive.summarize import ExtractiveSummarizer, Kind
from memory.archive.transcript import transcript_path, write_transcript
from memory.archive.upkeep import ArchiveJobs, RetryPolicy
from memory.profile.facts import Evidence, Fact, Shorten
from memory.profile.profiles import Profiles
from memory.storage.engine import session_factory
from memory.storage.identities import IdentityRef
from memory.storage.lookups import NewLookup
from memory.storage.messages import NewMessage, StoredMessage
from memory.storage.models import (
    Delivery,
    FireOutcome,
    Identity,
    Role,
    ScheduleKind,
)
from memory.storage.repositories import Repositories
from memory.storage.schedules import Firing, NewSchedule
from memory.token_count import message_tokens

# The erased person's word, and the other person's: lower case (as a full-text index
# keeps its terms) and starting unlike any other word (as its leaves are prefix-coded).
MARKER = "qxjzebrafish"
OTHER = "qxkotterwise"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
FILLER = " ".join(f"word{n}" for n in range(28))  # about 40 tokens a message
LIMITS = MemoryLimits(
    live_window_tokens=400, chunk_tokens=200, chunk_min_tokens=100, summary_tokens=60,
    consolidate_at=3, consolidate_count=2, rollup_keep=2, rollup_batch=2,
)  # fmt: skip
GROUP_ID = "-100777"
ANA_FIRST_IN_GROUP = 5  # Ana writes in the group from its 5th exchange on


class KeptInputs(ExtractiveSummarizer):
    """The extractive summariser, keeping every text it is given: what a model would read."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def summarize(self, text: str, *, kind: Kind, target_tokens: int) -> str:
        self.texts.append(text)
        return await super().summarize(text, kind=kind, target_tokens=target_tokens)


@dataclass
class World:
    """Two people (Ana, to be erased, and Bo), each with their own conversation, and a
    group they both write in; archived, summarised, with profiles and replies."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    repos: Repositories
    archive: Archive
    jobs: ArchiveJobs
    archive_dir: Path
    ana: IdentityRef
    ana_discord: uuid.UUID
    bo: IdentityRef
    group: uuid.UUID
    summarizer: KeptInputs
    minute: int = 0

    def now(self) -> datetime:
        self.minute += 1
        return T0 + timedelta(minutes=self.minute)

    async def say(
        self,
        conversation: uuid.UUID,
        who: uuid.UUID,
        channel: str,
        text: str,
        *,
        platform_id: str | None = None,
        reply: Delivery | None = Delivery.SENT,
        author: str = "someone",
    ) -> StoredMessage:
        message, _ = await self.repos.messages.add_message(
            conversation,
            NewMessage(
                Role.USER,
                channel,
                text,
                identity_id=who,
                author_name=author,
                platform_message_id=platform_id,
            ),
            now=self.now(),
        )
        if reply is not None:
            answer, _ = await self.repos.messages.add_message(
                conversation,
                NewMessage(
                    Role.ASSISTANT,
                    channel,
                    f"re {message.seq}",
                    reply_to_seq=message.seq,
                    delivery=Delivery.PENDING,
                ),
                now=self.now(),
            )
            if reply is Delivery.SENT:
                await self.repos.deliveries.sending(answer.id, 0)
                await self.repos.deliveries.part_sent(
                    answer.id, 0, channel, f"out-{answer.id}", now=self.now()
                )
                await self.repos.deliveries.sent(answer.id)
            elif reply is Delivery.FAILED:
                await self.repos.deliveries.attempt_failed(answer.id, "refused", final=True)
        return message

    async def archive_all(self, conversation: uuid.UUID, *, leave_pending: int = 0) -> None:
        """Cut, write transcript files, summarise (all but the newest `leave_pending`),
        swap into the timeline and roll up, as the gateway's jobs do."""
        chunks = await self.archive.cut(conversation, self.now())
        for chunk in chunks:
            assert chunk.transcript is not None
            path = transcript_path(self.archive_dir, conversation, chunk.id, chunk.time_start)
            write_transcript(path, chunk.transcript)
        for chunk in chunks[: len(chunks) - leave_pending]:
            await self.jobs.summarize(chunk.id)
        await self.archive.prepare_turn(conversation)
        for parent in await self.archive.plan_rollups(conversation, self.now()):
            await self.jobs.summarize(parent.id)


async def nothing(job: str, arg: str, *, key: str, defer: float = 0.0) -> None:
    return None


async def build_world(engine: AsyncEngine, data_dir: Path) -> World:
    sessions = session_factory(engine)
    archive_dir = data_dir / "archive"
    repos = Repositories.open(
        sessions, count_tokens=message_tokens, now=lambda: T0, archive_dir=archive_dir
    )
    archive = Archive(sessions, LIMITS)
    summarizer = KeptInputs()
    jobs = ArchiveJobs(
        archive=archive,
        messages=repos.messages,
        summarizer=summarizer,
        enqueue=nothing,
        now=lambda: T0,
        lease=timedelta(minutes=5),
        keep=keep,
        retry=RetryPolicy(1, 10, 3),
        sweep_grace=timedelta(minutes=1),
    )
    ana = await repos.identities.resolve_identity(
        "telegram", "100", display_name="Ana", timezone="Europe/Lisbon", now=T0
    )
    bo = await repos.identities.resolve_identity(
        "telegram", "300", display_name="Bo", timezone="UTC", now=T0
    )
    async with sessions() as session:
        discord = Identity(channel="discord", external_id="200", user_id=ana.user_id, created_at=T0)
        session.add(discord)
        await session.commit()
    group = await repos.conversations.group_conversation("telegram", GROUP_ID, title="Team", now=T0)
    world = World(
        engine, sessions, repos, archive, jobs, archive_dir, ana, discord.id, bo, group, summarizer
    )
    await _fill(world)
    return world


async def _fill(world: World) -> None:
    ana, bo, repos = world.ana, world.bo, world.repos
    for n in range(24):  # Ana's own conversation, on two channels
        discord = n % 3 == 0
        await world.say(
            ana.conversation_id,
            world.ana_discord if discord else ana.identity_id,
            "discord" if discord else "telegram",
            f"{MARKER} number {n} {FILLER}",
            platform_id=str(9_000_000 + n) if discord else f"tg-{n}",
            reply=Delivery.PENDING if n == 23 else Delivery.FAILED if n == 22 else Delivery.SENT,
        )
    await world.archive_all(ana.conversation_id, leave_pending=1)
    for n in range(16):  # the group: Bo alone at first, then both
        speaker = ana if n >= ANA_FIRST_IN_GROUP - 1 and n % 2 == 0 else bo
        word = MARKER if speaker is ana else OTHER
        await world.say(
            world.group,
            speaker.identity_id,
            "telegram",
            f"{word} group {n} {FILLER}",
            reply=Delivery.PENDING if n == 14 else Delivery.SENT,
        )
    await world.archive_all(world.group)
    # An operator's message to the group, addressed to Ana: the group's, not hers.
    await repos.messages.add_message(
        world.group,
        NewMessage(
            Role.ASSISTANT,
            "telegram",
            "operator notice for the group",
            identity_id=ana.identity_id,
            source="operator via REST",
            delivery=Delivery.SENT,
        ),
        now=world.now(),
    )
    for n in range(6):  # Bo's own conversation
        bo_says = (bo.conversation_id, bo.identity_id, "discord", f"{OTHER} {n}")
        await world.say(*bo_says, platform_id=str(8_000_000 + n))
    await _the_rest(world)


async def _the_rest(world: World) -> None:
    """Profiles, retired facts, pairing, link codes and watermarks of both people."""
    ana, bo, repos = world.ana, world.bo, world.repos
    profiles = Profiles(world.sessions)
    first = (await world.archive.chunks(ana.conversation_id))[0]
    evidence = (Evidence(first.id, (1,), T0),)
    await profiles.append(
        ana.user_id,
        [Fact(f"likes {MARKER} soup very much", evidence), Fact("lives by the sea")],
        world.now(),
        chunk_id=None,
    )
    view = await profiles.get(ana.user_id)
    await profiles.edit(
        ana.user_id,
        view.revision,
        [Shorten(1, f"likes {MARKER} soup")],
        world.now(),
        by="model: tidying",
    )
    await profiles.append(bo.user_id, [Fact(f"{OTHER} is Bo's word")], world.now(), chunk_id=None)
    for who, external in ((ana, "100"), (bo, "300")):
        await repos.pairings.request_pairing(
            "telegram", external, "x", now=world.now(), ttl=timedelta(days=1), cap=10
        )
        await repos.links.issue_link_code(
            who.identity_id, now=world.now(), ttl=timedelta(minutes=10)
        )
    # What the model looked up: in Ana's conversation, and in the group, answering Bo
    # with a read that quotes Ana.
    ana_last = await repos.messages.messages_after(ana.conversation_id, 0, 1)
    group_last = await repos.messages.messages_after(world.group, 0, 1)
    await repos.lookups.record(
        ana.conversation_id,
        ana_last[0].id,
        [NewLookup("archive_search", '{"query": "soup"}', f"{MARKER} soup")],
        now=world.now(),
    )
    await repos.lookups.record(
        world.group,
        group_last[0].id,
        [NewLookup("archive_read", '{"chunk_id": 1}', f"#9 {MARKER} group 4")],
        now=world.now(),
    )
    await _reminders(world)
    # Direct chats on Discord, known by the message each was read up to.
    await repos.watermarks.advance("discord", "dm-ana", 9_000_021, private=True, now=T0)
    await repos.watermarks.advance("discord", "dm-bo", 8_000_005, private=True, now=T0)
    await repos.watermarks.advance("discord", "dm-unknown", 7_000_000, private=True, now=T0)


async def _reminders(world: World) -> None:
    """Ana's reminders: a weekly one far ahead (no sweep fires it), and one that fired."""
    schedules, conversation = world.repos.schedules, world.ana.conversation_id
    await schedules.add(
        NewSchedule(
            kind=ScheduleKind.REMINDER,
            text=f"{MARKER} dentist",
            starts_local="2099-01-05T09:00:00",
            repeat="FREQ=WEEKLY;BYDAY=MO",
            created_by="the person",
            next_local="2099-01-05T09:00:00",
            next_due_at=datetime(2099, 1, 5, 9, 0, tzinfo=UTC),
            conversation_id=conversation,
            zone="Europe/Lisbon",
            channel=None,
        ),
        now=T0,
    )
    fired = await schedules.add(
        NewSchedule(
            kind=ScheduleKind.FOLLOW_UP,
            text="ask how the move went",
            starts_local="2026-03-01T10:00:00",
            repeat=None,
            created_by="the assistant",
            next_local="2026-03-01T10:00:00",
            next_due_at=T0 + timedelta(hours=1),
            conversation_id=conversation,
            zone="Europe/Lisbon",
            channel=None,
        ),
        now=T0,
    )
    firing = Firing(
        T0 + timedelta(hours=1), FireOutcome.SKIPPED, 0, "follow-ups were off", None, None, None
    )
    await schedules.fire(fired, firing, now=T0 + timedelta(hours=1))


# -- looking at everything ---------------------------------------------------------------


async def dump(engine: AsyncEngine) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table the database has (its own reflection, so tables the
    models do not describe, such as full-text indexes, are read too)."""

    def read(connection: Connection) -> dict[str, list[dict[str, Any]]]:
        metadata = MetaData()
        metadata.reflect(connection)
        return {
            name: [dict(row._mapping) for row in connection.execute(table.select())]
            for name, table in metadata.tables.items()
        }

    async with engine.connect() as connection:
        return await connection.run_sync(read)


def mentions(value: Any, needles: set[str]) -> bool:
    if isinstance(value, bytes):
        return any(n.encode() in value for n in needles)
    return any(n in str(value) for n in needles)


def files_with(root: Path, needle: str) -> list[Path]:
    """Every file under `root` holding `needle`, byte for byte."""
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


async def scalar(world: World, query: Any) -> int:
    async with world.sessions() as session:
        return int(await session.scalar(query) or 0)


# -- erasing a person ----------------------------------------------------------------------

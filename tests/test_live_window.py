"""The live window kept between turns gives exactly what a fresh read gives: after new
messages, an archive swap, an erasure, a merge, an import's kind of insert (a seq
before the newest), and messages stored by another process. Each check compares the
kept `Conversations` (and the answerer's kept renderings) of the world's repositories
with a second, fresh set of repositories on the same database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select

from gateway.turns.live_window import KeptRenderings
from memory.context import LiveRendering, fit_to_budget, render_live
from memory.provenance import COMMAND_SOURCE
from memory.storage.conversations import Conversations
from memory.storage.live_window import KeptWindow, LiveWindows, bump_live_version
from memory.storage.messages import NewMessage
from memory.storage.models import Chunk, ChunkStatus, Message, Role
from memory.storage.repositories import Repositories
from memory.token_count import estimate_tokens, message_tokens
from tests.support.world import World

BUDGETS = (10**9, 400, 120, 30)


async def same_as_fresh(world: World, conversation_id: uuid.UUID, kept: KeptRenderings) -> None:
    """The kept read and rendering equal a fresh read by another process's repositories
    (nothing kept) and a fresh rendering, at several budgets."""
    other = Repositories.open(world.sessions, count_tokens=estimate_tokens, now=world.now)
    fresh = await other.conversations.load_turn(conversation_id)
    state = await world.repos.conversations.load_turn(conversation_id)
    assert state == fresh
    assert state is not None
    rendering = kept.render(state)
    for budget in BUDGETS:
        expected = fit_to_budget(render_live(state.live, state.timezone, group=state.group), budget)
        turns, tokens = rendering.fit(budget)
        assert turns == expected
        assert tokens == sum(message_tokens(turn.content) for turn in expected)


async def ask(world: World, conversation_id: uuid.UUID, who: uuid.UUID, text: str) -> None:
    await world.say(conversation_id, who, "telegram", text, reply=None)


async def test_kept_window_follows_new_messages_and_other_processes(world: World) -> None:
    bo, kept = world.bo, KeptRenderings()
    await ask(world, bo.conversation_id, bo.identity_id, "first")
    await same_as_fresh(world, bo.conversation_id, kept)
    # Stored by another process: its own repositories, the same database.
    other = Repositories.open(world.sessions, count_tokens=estimate_tokens, now=world.now)
    for n in range(3):
        await other.messages.add_message(
            bo.conversation_id,
            NewMessage(Role.USER, "telegram", f"[elsewhere {n}]", identity_id=bo.identity_id),
            now=world.now() + timedelta(hours=n),
        )
        await same_as_fresh(world, bo.conversation_id, kept)
    await world.say(bo.conversation_id, bo.identity_id, "telegram", "answered")
    await ask(world, bo.conversation_id, bo.identity_id, "and again")
    await same_as_fresh(world, bo.conversation_id, kept)


async def test_an_archive_swap_outdates_the_kept_window(world: World) -> None:
    ana, kept = world.ana, KeptRenderings()
    await ask(world, ana.conversation_id, ana.identity_id, "before the swap")
    await same_as_fresh(world, ana.conversation_id, kept)
    before = await world.repos.conversations.load_turn(ana.conversation_id)
    assert before is not None
    # The world left one chunk cut but pending: summarised and swapped in now, its
    # messages leave the live window.
    async with world.sessions() as session:
        pending = await session.scalars(
            select(Chunk.id).where(
                Chunk.conversation_id == ana.conversation_id, Chunk.status == ChunkStatus.PENDING
            )
        )
        chunk_ids = list(pending)
    assert chunk_ids
    for chunk_id in chunk_ids:
        await world.jobs.summarize(chunk_id)
    assert (await world.archive.prepare_turn(ana.conversation_id))[0]
    await ask(world, ana.conversation_id, ana.identity_id, "after the swap")
    await same_as_fresh(world, ana.conversation_id, kept)
    after = await world.repos.conversations.load_turn(ana.conversation_id)
    assert after is not None
    assert after.live[0].seq > before.live[0].seq


async def test_erasure_outdates_the_kept_window(world: World) -> None:
    bo, kept = world.bo, KeptRenderings()
    await ask(world, world.group, bo.identity_id, "Bo asks the group")
    await same_as_fresh(world, world.group, kept)
    before = await world.repos.conversations.load_turn(world.group)
    assert before is not None
    assert await world.repos.erasure.erase_user(world.ana.user_id) is not None
    await same_as_fresh(world, world.group, kept)
    after = await world.repos.conversations.load_turn(world.group)
    assert after is not None
    assert after.live != before.live


async def test_a_merge_outdates_the_kept_window(world: World) -> None:
    ana, bo, kept = world.ana, world.bo, KeptRenderings()
    await ask(world, bo.conversation_id, bo.identity_id, "Bo before the merge")
    await same_as_fresh(world, bo.conversation_id, kept)
    merged = await world.repos.links.merge_users(bo.user_id, ana.user_id, now=world.now())
    assert merged
    await ask(world, bo.conversation_id, bo.identity_id, "after the merge")
    await same_as_fresh(world, bo.conversation_id, kept)


async def test_a_message_before_the_newest_is_read_once_the_version_moves(world: World) -> None:
    """An import stores messages at seqs before the newest: what bumps the version
    makes the kept window read them (a message put there without it would not be)."""
    bo, kept = world.bo, KeptRenderings()
    await ask(world, bo.conversation_id, bo.identity_id, "newest")
    await same_as_fresh(world, bo.conversation_id, kept)
    async with world.sessions() as session:
        lowest = await session.scalar(
            select(func.min(Message.seq)).where(Message.conversation_id == bo.conversation_id)
        )
        assert lowest == 1
        await session.execute(
            insert(Message).values(
                conversation_id=bo.conversation_id,
                seq=0,
                role=Role.USER,
                channel="telegram",
                text="given back by an import",
                created_at=world.now(),
                token_count=5,
            )
        )
        await session.execute(bump_live_version([bo.conversation_id]))
        await session.commit()
    await same_as_fresh(world, bo.conversation_id, kept)
    state = await world.repos.conversations.load_turn(bo.conversation_id)
    assert state is not None
    assert state.live[0].text == "given back by an import"


async def test_a_command_answer_leaves_its_command_out_of_the_kept_rendering(
    world: World,
) -> None:
    bo, kept = world.bo, KeptRenderings()
    await ask(world, bo.conversation_id, bo.identity_id, "/status")
    await same_as_fresh(world, bo.conversation_id, kept)
    state = await world.repos.conversations.load_turn(bo.conversation_id)
    assert state is not None
    await world.repos.messages.add_message(
        bo.conversation_id,
        NewMessage(
            Role.EVENT,
            "telegram",
            "all well",
            source=COMMAND_SOURCE,
            reply_to_seq=state.unanswered[-1].seq,
        ),
        now=world.now(),
    )
    await ask(world, bo.conversation_id, bo.identity_id, "thanks")
    await same_as_fresh(world, bo.conversation_id, kept)


async def test_bounds_evict_the_least_recently_used(world: World) -> None:
    windows = LiveWindows(max_conversations=2, max_messages=5)
    state = await world.repos.conversations.load_turn(world.bo.conversation_id)
    assert state is None  # everything answered
    views = (await world.repos.messages.messages_after(world.bo.conversation_id, 0, 3))[:3]
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    windows.keep(a, KeptWindow(0, tuple(views[:2])))
    windows.keep(b, KeptWindow(0, tuple(views[:2])))
    assert windows.get(a, 0) is not None  # a is now the most recent
    windows.keep(c, KeptWindow(0, tuple(views[:2])))
    assert windows.get(b, 0) is None
    assert len(windows) == 2
    windows.keep(b, KeptWindow(0, tuple(views)))  # 2 + 2 + 3 > 5: the oldest go
    assert windows.kept_messages <= 5
    assert windows.get(b, 1) is None  # another version: dropped
    assert windows.get(b, 0) is None


@pytest.mark.parametrize("budget", BUDGETS)
async def test_rendering_a_window_that_shrank_or_changed(world: World, budget: int) -> None:
    await ask(world, world.group, world.bo.identity_id, "in the group")
    state = await Conversations(world.sessions).load_turn(world.group)
    assert state is not None
    rendering = LiveRendering(state.timezone, state.group)
    for live in (state.live, state.live[3:], state.live[:-2], state.live[::2], state.live):
        rendering.update(live)
        expected = fit_to_budget(render_live(live, state.timezone, group=True), budget)
        assert rendering.fit(budget)[0] == expected
